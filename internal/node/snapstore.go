package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/nodecontract"
)

// The background store. Snapshot saves a sandbox's image into DataDir/images/pending/<snapshot> and,
// beside it, a job file (<snapshot>.job: the tenant, the manifest's meta and the image's description),
// both synced, and tells the control plane the image is saved (Config.SnapshotCalls.SnapshotSaved)
// before it answers. A store then runs for the snapshot, at most one at a time: it says the image is
// saved again if that was not heard (or after a restart), asks the control plane for the tenant's grant,
// writes the image into the snapshot store (storeImage), clears the grant, and reports the snapshot
// stored (or its image lost), trying again with backoff until one of them holds. The job file goes once the report is taken. A node that restarts
// (or a process that does, the control plane with it) starts again the stores whose job files it finds.
//
// The control plane answers errdefs.ErrNotFound, to the grant or to the report, for a snapshot that no
// longer waits for its image (deleted, failed, or never recorded for this node): the node drops the
// image and the job.

// Backoff of the background stores.
const (
	// storeBackoff is the first wait before a store is tried again; each failure doubles it, up to
	// maxStoreBackoff.
	storeBackoff    = time.Second
	maxStoreBackoff = 5 * time.Minute
	// maxJobFile bounds what is read of a job file.
	maxJobFile = 1 << 20
	// jobSuffix ends the name of a job file.
	jobSuffix = ".job"
	// savedTimeout bounds Snapshot's call of SnapshotCalls.SnapshotSaved.
	savedTimeout = 30 * time.Second
)

// lostReason is the SnapshotReport.Lost of an image gone from the node before it was stored.
const lostReason = "its saved image was lost before it reached the snapshot store"

// errImageLost is what storeImage answers for an image the node does not have and the snapshot store
// does not hold.
var errImageLost = fmt.Errorf("the saved image is not on the node and not in the snapshot store: %w", errdefs.ErrNotFound)

// storeJob is what a background store needs of the snapshot it stores, kept in its job file.
type storeJob struct {
	Tenant string             `json:"tenant"`
	Meta   map[string]string  `json:"meta,omitempty"`
	Image  nodecontract.Image `json:"image"`
}

// snapStores runs the background stores, at most one per snapshot.
type snapStores struct {
	mu sync.Mutex
	// runs holds the running stores by snapshot ID; guarded by mu.
	runs map[string]*storeRun
	// closed is set by drain and close: no store starts after it; guarded by mu.
	closed bool
	// draining is closed by drain: the stores end after the try they are in, without waiting to try
	// again.
	draining     chan struct{}
	drainingOnce sync.Once
	// backoff and maxBackoff are the first and the longest wait between tries (tests shorten them);
	// guarded by mu.
	backoff, maxBackoff time.Duration
	wg                  sync.WaitGroup
}

// storeRun is one running store.
type storeRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	// again is set when Snapshot saved a new image of the snapshot while the store ran: it goes round
	// once more rather than end. Guarded by snapStores.mu.
	again bool
	// said is set once the control plane took the saved image on record (SnapshotSaved). Guarded by
	// snapStores.mu.
	said bool
}

func newSnapStores() snapStores {
	return snapStores{runs: map[string]*storeRun{}, backoff: storeBackoff, maxBackoff: maxStoreBackoff, draining: make(chan struct{})}
}

// jobPath is the job file of the store of snapID.
func (im *images) jobPath(snapID string) string { return filepath.Join(im.pending, snapID+jobSuffix) }

// writeJob records j as the job of the store of snapID, atomically and synced. On error no job file is
// left.
func (im *images) writeJob(snapID string, j storeJob) (err error) {
	b, err := json.Marshal(j)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(im.pending, "."+snapID+jobSuffix+"-*")
	if err != nil {
		return fmt.Errorf("write the store's job: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			os.Remove(tmp)
			os.Remove(im.jobPath(snapID))
			err = fmt.Errorf("write the store's job: %w", err)
		}
	}()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, im.jobPath(snapID)); err != nil {
		return err
	}
	return syncDir(im.pending)
}

// readJob reads the job of the store of snapID.
func (im *images) readJob(snapID string) (storeJob, error) {
	f, err := os.Open(im.jobPath(snapID))
	if err != nil {
		return storeJob{}, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxJobFile))
	if err != nil {
		return storeJob{}, err
	}
	var j storeJob
	if err := json.Unmarshal(b, &j); err != nil || j.Tenant == "" {
		return storeJob{}, fmt.Errorf("the store's job of snapshot %s is unreadable (%v): %w", snapID, err, errdefs.ErrInternal)
	}
	return j, nil
}

// sweepPending removes from the pending directory what no store will take: images without a job
// (a checkpoint a crash cut off; nothing waits for them) and torn job files. It returns the snapshots
// whose jobs are left, whose stores are to start again. Call it before any store runs.
func (im *images) sweepPending() []string {
	entries, _ := os.ReadDir(im.pending)
	jobs := map[string]bool{}
	for _, e := range entries {
		if id, ok := strings.CutSuffix(e.Name(), jobSuffix); ok && e.Type().IsRegular() && checkSnapID(id) == nil {
			jobs[id] = true
		}
	}
	var ids []string
	for _, e := range entries {
		name := e.Name()
		switch id, isJob := strings.CutSuffix(name, jobSuffix); {
		case isJob && jobs[id]:
			ids = append(ids, id)
		case e.IsDir() && jobs[name]:
		default:
			os.RemoveAll(filepath.Join(im.pending, name))
		}
	}
	return ids
}

// saySaved tells the control plane that the node saved img as the image of snapID (SnapshotSaved),
// for Snapshot.
func (im *images) saySaved(ctx context.Context, tenantID, snapID string, img nodecontract.Image) error {
	ctx, cancel := context.WithTimeout(ctx, savedTimeout)
	defer cancel()
	return im.calls.SnapshotSaved(ctx, nodecontract.SnapshotReport{TenantID: tenantID, SnapshotID: snapID, Image: img})
}

// startStore starts the background store of snapID, unless one runs (which then goes round once more
// before it ends), the node stores nothing in the background, or it is shutting down. said tells
// whether the control plane took the image on record already. The caller holds the snapshot's lock
// (perSnap) if it just wrote the job.
func (im *images) startStore(snapID string, said bool) {
	if im.calls == nil {
		return
	}
	st := &im.stores
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return // the job stays: the next start of the node takes it up
	}
	if r := st.runs[snapID]; r != nil {
		r.again, r.said = true, said
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &storeRun{cancel: cancel, done: make(chan struct{}), said: said}
	st.runs[snapID] = r
	st.wg.Add(1)
	go func() { // owner: im.stores; ends once the image is stored and reported or dropped, or on stop or close
		defer st.wg.Done()
		defer close(r.done)
		defer cancel()
		defer st.forget(snapID, r)
		im.runStore(ctx, snapID, r)
	}()
}

// forget removes r from the running stores, if it is still snapID's.
func (st *snapStores) forget(snapID string, r *storeRun) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.runs[snapID] == r {
		delete(st.runs, snapID)
	}
}

// stop stops the store of snapID, if one runs, and waits until it has.
func (st *snapStores) stop(snapID string) {
	st.mu.Lock()
	r := st.runs[snapID]
	st.mu.Unlock()
	if r != nil {
		r.cancel()
		<-r.done
	}
}

// drain lets the stores finish the tries they are in (a clean shutdown: a paused session's image
// reaches the snapshot store if it can, in time, for another node to resume it) and end instead of
// trying again; no store starts after it. Those that end unfinished keep their jobs.
func (st *snapStores) drain() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
	st.drainingOnce.Do(func() { close(st.draining) })
}

// close stops every store (Local.Shutdown waits for them: wg). Their jobs stay: the next start of the
// node takes them up.
func (st *snapStores) close() {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
	for _, r := range st.runs {
		r.cancel()
	}
}

// wait is how long a store waits after its tries-th failure in a row (from 0): backoff, doubled with
// each failure, up to maxBackoff.
func (st *snapStores) wait(tries int) time.Duration {
	st.mu.Lock()
	defer st.mu.Unlock()
	w := st.backoff
	for ; tries > 0 && w < st.maxBackoff; tries-- {
		w *= 2
	}
	return min(w, st.maxBackoff)
}

// runStore stores the image of snapID and reports it, trying again with backoff, until it is done or
// ctx ends.
func (im *images) runStore(ctx context.Context, snapID string, r *storeRun) {
	tries := 0 // failed in a row
	var rep *nodecontract.SnapshotReport
	for {
		var done bool
		var err error
		if rep == nil {
			rep, done, err = im.storeOnce(ctx, snapID, r)
		}
		if err == nil && !done {
			err = im.calls.SnapshotStored(ctx, *rep)
			if im.unwanted(snapID, err) {
				err = nil
			}
			done = err == nil
		}
		if done {
			if im.finishStore(snapID, r) {
				return
			}
			rep, tries = nil, 0 // a new image of it was saved meanwhile: store that one
			continue
		}
		if ctx.Err() != nil {
			return
		}
		wait := im.stores.wait(tries)
		tries++
		im.log.Warn("store snapshot image; retrying", "snapshot", snapID, "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-im.stores.draining:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// finishStore ends the store r of snapID, removing its job, unless Snapshot saved a new image of it
// meanwhile; it reports whether it ended.
func (im *images) finishStore(snapID string, r *storeRun) bool {
	unlock := im.perSnap.lock(snapID)
	defer unlock()
	im.stores.mu.Lock()
	defer im.stores.mu.Unlock()
	if r.again {
		r.again = false
		return false
	}
	if im.stores.runs[snapID] == r {
		delete(im.stores.runs, snapID)
	}
	if err := os.Remove(im.jobPath(snapID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		im.log.Warn("remove a finished store's job", "snapshot", snapID, "err", err)
	}
	return true
}

// unwanted reports whether err, the control plane's answer about snapID, says that no snapshot waits
// for its image (errdefs.ErrNotFound), and if so drops the image and its job.
func (im *images) unwanted(snapID string, err error) bool {
	if !errors.Is(err, errdefs.ErrNotFound) {
		return false
	}
	im.log.Info("no snapshot waits for the image: dropping it", "snapshot", snapID, "err", err)
	im.drop(snapID)
	return true
}

// storeOnce tries once to store the image of snapID (the store r's): it returns the report to make, or
// done if there is nothing to report (the snapshot no longer waits for the image, which is dropped).
func (im *images) storeOnce(ctx context.Context, snapID string, r *storeRun) (rep *nodecontract.SnapshotReport, done bool, err error) {
	j, err := im.readJob(snapID)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, true, nil // dropped meanwhile
	case err != nil:
		// Without its tenant, nobody can be asked for the grant nor told: nothing can be done with it.
		im.log.Error("dropping a snapshot image whose store's job cannot be read", "snapshot", snapID, "err", err)
		im.drop(snapID)
		return nil, true, nil
	}
	im.stores.mu.Lock()
	said := r.said
	im.stores.mu.Unlock()
	if !said {
		err := im.calls.SnapshotSaved(ctx, nodecontract.SnapshotReport{TenantID: j.Tenant, SnapshotID: snapID, Image: j.Image})
		if im.unwanted(snapID, err) {
			return nil, true, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("say the image is saved: %w", err)
		}
		im.stores.mu.Lock()
		r.said = true
		im.stores.mu.Unlock()
	}
	t0 := time.Now()
	g, err := im.calls.SnapshotGrant(ctx, j.Tenant, snapID)
	if im.unwanted(snapID, err) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("ask for the tenant's grant: %w", err)
	}
	defer g.Clear()
	stats, err := im.storeImage(ctx, j.Tenant, snapID, g, j.Meta)
	rep = &nodecontract.SnapshotReport{TenantID: j.Tenant, SnapshotID: snapID, Image: j.Image}
	switch {
	case errors.Is(err, errImageLost):
		im.log.Error("snapshot image lost before it was stored", "snapshot", snapID, "tenant", j.Tenant)
		rep.Lost = lostReason
	case err != nil:
		return nil, false, err
	default:
		rep.LogicalBytes, rep.NewStoredBytes = stats.LogicalBytes, stats.NewStoredBytes
		rep.StoreMillis = time.Since(t0).Milliseconds()
	}
	return rep, false, nil
}
