package node

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
	"github.com/airlockrun/airlock/internal/runtime"
)

// accelerated is a VM driver that reports its accelerator (nodecontract.AccelKVM or nodecontract.AccelTCG).
type accelerated interface{ Accel() string }

// Describe reports the abilities driver d declares.
func Describe(d runtime.Driver) nodecontract.Runtime {
	r := nodecontract.Runtime{Name: d.Name(), Abilities: []string{}}
	_, cp := d.(runtime.Checkpointer)
	_, rs := d.(runtime.Restorer)
	if cp && rs {
		if f, ok := d.(runtime.FilesOnly); ok && f.FilesOnly() {
			r.Abilities = append(r.Abilities, nodecontract.AbilityFilesSnapshots)
		} else {
			r.Abilities = append(r.Abilities, nodecontract.AbilityMemorySnapshots)
		}
		r.Abilities = append(r.Abilities, nodecontract.AbilityFork)
	}
	if a, ok := d.(accelerated); ok {
		r.Accel = a.Accel()
	}
	return r
}

// drivers are the node's runtime drivers by name, and which one runs each sandbox.
type drivers struct {
	def    string
	byName map[string]runtime.Driver

	mu sync.Mutex
	// of maps a sandbox to its driver's name, from its create (or recover) to its destroy; guarded by mu.
	of map[string]string
}

func newDrivers(def runtime.Driver, more []runtime.Driver) (*drivers, error) {
	ds := &drivers{def: def.Name(), byName: map[string]runtime.Driver{def.Name(): def}, of: map[string]string{}}
	for _, d := range more {
		if _, dup := ds.byName[d.Name()]; dup {
			return nil, fmt.Errorf("node: two runtime drivers named %q: %w", d.Name(), errdefs.ErrInvalidArgument)
		}
		ds.byName[d.Name()] = d
	}
	return ds, nil
}

// get returns the driver named name ("": the default).
func (ds *drivers) get(name string) (runtime.Driver, error) {
	if name == "" {
		name = ds.def
	}
	d, ok := ds.byName[name]
	if !ok {
		return nil, fmt.Errorf("this node has no %q runtime (it has %v): %w", name, ds.names(), errdefs.ErrFailedPrecondition)
	}
	return d, nil
}

func (ds *drivers) names() []string {
	var out []string
	for n := range ds.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// track records that sandbox id runs on the driver named name.
func (ds *drivers) track(id, name string) {
	if name == "" {
		name = ds.def
	}
	ds.mu.Lock()
	ds.of[id] = name
	ds.mu.Unlock()
}

func (ds *drivers) untrack(id string) {
	ds.mu.Lock()
	delete(ds.of, id)
	ds.mu.Unlock()
}

// driverOf returns the driver of sandbox id (the default one for a sandbox the node does not know).
func (ds *drivers) driverOf(id string) runtime.Driver {
	ds.mu.Lock()
	name, ok := ds.of[id]
	ds.mu.Unlock()
	if !ok {
		name = ds.def
	}
	return ds.byName[name]
}

// destroy destroys sandbox id with its driver, or, for a sandbox the node does not know (what a
// crashed run left), with every driver.
func (ds *drivers) destroy(ctx context.Context, id string) error {
	ds.mu.Lock()
	name, ok := ds.of[id]
	ds.mu.Unlock()
	if ok {
		return ds.byName[name].Destroy(ctx, id)
	}
	var errs []error
	for _, n := range ds.names() {
		errs = append(errs, ds.byName[n].Destroy(ctx, id))
	}
	return errors.Join(errs...)
}

// list reports the sandboxes of every driver.
func (ds *drivers) list(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	var ids []string
	for _, n := range ds.names() {
		got, err := ds.byName[n].List(ctx)
		if err != nil {
			return nil, err
		}
		for _, id := range got {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids, nil
}

// CgroupParents reports the cgroup parents of the node's drivers that run their sandboxes in one
// (runtime.Confined), and the names of those that do not (their sandboxes cannot be fenced from
// outside the node process).
func (n *Local) CgroupParents() (parents, unconfined []string) {
	for _, name := range n.drv.names() {
		if c, ok := n.drv.byName[name].(runtime.Confined); ok && c.CgroupParent() != "" {
			parents = append(parents, c.CgroupParent())
		} else {
			unconfined = append(unconfined, name)
		}
	}
	return parents, unconfined
}

// Runtimes reports the node's runtime drivers, the default first.
func (n *Local) Runtimes(ctx context.Context) ([]nodecontract.Runtime, error) {
	out := []nodecontract.Runtime{Describe(n.drv.byName[n.drv.def])}
	for _, name := range n.drv.names() {
		if name != n.drv.def {
			out = append(out, Describe(n.drv.byName[name]))
		}
	}
	return out, nil
}
