package internal

import (
	_ "github.com/coder/websocket"
	_ "github.com/creack/pty"
	_ "github.com/goccy/go-yaml"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/google/nftables"
	_ "github.com/google/uuid"
	_ "github.com/opencontainers/runtime-spec/specs-go"
	_ "github.com/spf13/cobra"
	_ "github.com/vishvananda/netlink"
	_ "github.com/vishvananda/netns"
	_ "golang.org/x/net/dns/dnsmessage"
	_ "golang.org/x/sys/unix"
	_ "modernc.org/sqlite"
)
