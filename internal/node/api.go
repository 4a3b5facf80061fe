package node

import "github.com/airlockrun/airlock/internal/nodecontract"

var (
	_ nodecontract.Node          = (*Local)(nil)
	_ nodecontract.ImageImporter = (*Local)(nil)
	_ nodecontract.ImageMaker    = (*Local)(nil)
)
