package firecracker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/airlockrun/airlock/internal/errdefs"
	"github.com/airlockrun/airlock/internal/runtime/vm"
)

// A small client of Firecracker's HTTP API (src/firecracker/swagger/firecracker.yaml), over the API's
// unix socket in the VM's jail: only the calls the driver makes, with the swagger's field names. No SDK
// module is used. Firecracker runs as the VM's unprivileged uid, so its answers are bounded and
// otherwise only reported.

// The request bodies, named as the swagger's definitions.
type (
	bootSource struct {
		KernelImagePath string `json:"kernel_image_path"`
		InitrdPath      string `json:"initrd_path,omitempty"`
		BootArgs        string `json:"boot_args,omitempty"`
	}
	machineConfig struct {
		VcpuCount  int   `json:"vcpu_count"`
		MemSizeMib int64 `json:"mem_size_mib"`
	}
	drive struct {
		DriveID      string `json:"drive_id"`
		PathOnHost   string `json:"path_on_host"`
		IsRootDevice bool   `json:"is_root_device"`
		IsReadOnly   bool   `json:"is_read_only"`
	}
	networkInterface struct {
		IfaceID     string `json:"iface_id"`
		HostDevName string `json:"host_dev_name"`
		GuestMAC    string `json:"guest_mac,omitempty"`
	}
	vsockDevice struct {
		GuestCID int    `json:"guest_cid"`
		UDSPath  string `json:"uds_path"`
	}
	entropyDevice  struct{}
	instanceAction struct {
		ActionType string `json:"action_type"`
	}
	vmState struct {
		State string `json:"state"`
	}
	snapshotCreate struct {
		SnapshotType string `json:"snapshot_type"`
		SnapshotPath string `json:"snapshot_path"`
		MemFilePath  string `json:"mem_file_path"`
	}
	memoryBackend struct {
		BackendType string `json:"backend_type"`
		BackendPath string `json:"backend_path"`
	}
	snapshotLoad struct {
		SnapshotPath string        `json:"snapshot_path"`
		MemBackend   memoryBackend `json:"mem_backend"`
		ResumeVM     bool          `json:"resume_vm"`
	}
	apiError struct {
		FaultMessage string `json:"fault_message"`
	}
)

// maxAnswer bounds an answer's body: Firecracker's are a short fault message, or nothing.
const maxAnswer = 64 << 10

// apiTimeout bounds one call; a snapshot of a large guest takes the longest.
const apiTimeout = 5 * time.Minute

// api is a client of one Firecracker's API.
type api struct {
	hc   *http.Client
	dial func(ctx context.Context) (net.Conn, error)
}

// newAPI returns a client that reaches the API through dial (a connection to its socket).
func newAPI(dial func(ctx context.Context) (net.Conn, error)) *api {
	return &api{dial: dial, hc: &http.Client{
		Transport: &http.Transport{
			DialContext:            func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
			DisableKeepAlives:      true,
			MaxResponseHeaderBytes: maxAnswer,
			ResponseHeaderTimeout:  apiTimeout,
		},
		// Firecracker answers; it never redirects.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (a *api) put(ctx context.Context, path string, body any) error {
	return a.call(ctx, http.MethodPut, path, body)
}

func (a *api) patch(ctx context.Context, path string, body any) error {
	return a.call(ctx, http.MethodPatch, path, body)
}

// call sends body as JSON and expects a 2xx answer; an error answer is reported with its
// fault_message.
func (a *api) call(ctx context.Context, method, path string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("firecracker %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	ans, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return fmt.Errorf("firecracker %s %s: %w", method, path, err)
	}
	if len(ans) > maxAnswer {
		return fmt.Errorf("firecracker %s %s: an answer of over %d bytes: %w", method, path, maxAnswer, errdefs.ErrInvalidArgument)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	var e apiError
	msg := ""
	if json.Unmarshal(ans, &e) == nil && e.FaultMessage != "" {
		msg = e.FaultMessage
	} else {
		msg = fmt.Sprintf("an answer that is not an error object (%d bytes)", len(ans))
	}
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	kind := errdefs.ErrFailedPrecondition
	if resp.StatusCode >= 500 {
		kind = errdefs.ErrInternal
	}
	return fmt.Errorf("firecracker %s %s: %s: %q: %w", method, path, resp.Status, msg, kind)
}

// Names of the VM's devices, and its files inside its jail (the same in every jail, so that a snapshot
// made in one is restored in another: Firecracker's snapshot records the drives' and the vsock
// socket's paths).
const (
	rootDriveID = "root"
	diskDriveID = "disk"
	netIfaceID  = "eth0"

	jailKernel    = "/vmlinux"
	jailInitramfs = "/initramfs.cpio"
	jailRoot      = "/root.img"
	jailDisk      = "/disk.img"
	jailVsock     = "/v.sock"
	jailAPI       = "/run/firecracker.socket"
	jailSnapDir   = "/snapshot"
	jailSnapState = jailSnapDir + "/state"
	jailSnapMem   = jailSnapDir + "/memory"
	jailLoadDir   = "/restore"
	jailLoadState = jailLoadDir + "/state"
	jailLoadMem   = jailLoadDir + "/memory"
)

// guestCID is the guest's vsock CID: each VM has its own device, so all can have the same.
const guestCID = 3

// machine is what a VM is booted with.
type machine struct {
	MemoryMiB int64
	CPUs      int
	MAC       string // "" with no network
	BootArgs  string
}

// configure configures a fresh Firecracker for m and starts the guest.
func (a *api) configure(ctx context.Context, m machine) error {
	calls := []struct {
		path string
		body any
	}{
		{"/boot-source", bootSource{KernelImagePath: jailKernel, InitrdPath: jailInitramfs, BootArgs: m.BootArgs}},
		{"/machine-config", machineConfig{VcpuCount: m.CPUs, MemSizeMib: m.MemoryMiB}},
		{"/drives/" + rootDriveID, drive{DriveID: rootDriveID, PathOnHost: jailRoot, IsReadOnly: true}},
		{"/drives/" + diskDriveID, drive{DriveID: diskDriveID, PathOnHost: jailDisk}},
	}
	if m.MAC != "" {
		calls = append(calls, struct {
			path string
			body any
		}{"/network-interfaces/" + netIfaceID, networkInterface{IfaceID: netIfaceID, HostDevName: vm.TapName, GuestMAC: m.MAC}})
	}
	calls = append(calls, []struct {
		path string
		body any
	}{
		{"/vsock", vsockDevice{GuestCID: guestCID, UDSPath: jailVsock}},
		{"/entropy", entropyDevice{}},
		{"/actions", instanceAction{ActionType: "InstanceStart"}},
	}...)
	for _, c := range calls {
		if err := a.put(ctx, c.path, c.body); err != nil {
			return err
		}
	}
	return nil
}

// pause stops the guest's vCPUs.
func (a *api) pause(ctx context.Context) error {
	return a.patch(ctx, "/vm", vmState{State: "Paused"})
}

// resume lets the guest's vCPUs run again.
func (a *api) resume(ctx context.Context) error {
	return a.patch(ctx, "/vm", vmState{State: "Resumed"})
}

// snapshot writes a full snapshot of the paused guest into the jail's snapshot directory.
func (a *api) snapshot(ctx context.Context) error {
	return a.put(ctx, "/snapshot/create", snapshotCreate{SnapshotType: "Full", SnapshotPath: jailSnapState, MemFilePath: jailSnapMem})
}

// load loads the snapshot in the jail's restore directory into a fresh Firecracker and resumes it.
func (a *api) load(ctx context.Context) error {
	return a.put(ctx, "/snapshot/load", snapshotLoad{SnapshotPath: jailLoadState,
		MemBackend: memoryBackend{BackendType: "File", BackendPath: jailLoadMem}, ResumeVM: true})
}
