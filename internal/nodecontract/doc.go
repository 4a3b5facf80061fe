// Package nodecontract is the contract between the control plane and the nodes: the Node interface the
// control plane calls (node.Local in its own process, nodeapi.Client for a node in another) and the
// types its calls carry. The control plane imports this package, never the node's own packages, so the
// node keeps its runtime drivers, daemon links and snapshot pipeline to itself.
package nodecontract
