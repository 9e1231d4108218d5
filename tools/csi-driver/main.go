// Command csi-driver is a CSI driver (github.com/container-storage-interface/spec) whose
// volumes must be attached to a node before a pod there mounts them, as a cloud disk
// must: its CSIDriver says attachRequired, so Kubernetes' attach-detach controller
// creates a VolumeAttachment per volume and node, the CSI external-attacher calls this
// driver's ControllerPublishVolume, and only then does the node's kubelet publish the
// volume into the pod. A volume is a folder on this machine (under -data-dir), bound
// into the pod's volume path; nothing else stands behind it.
//
// Two modes, as a driver's Deployment and DaemonSet run it:
//
//	-mode controller  the Identity and Controller services on -endpoint, for the
//	                  external-attacher (publish and unpublish always succeed: the
//	                  attach-detach controller decides who may attach, not the driver)
//	-mode node        the Identity and Node services on -endpoint, and the kubelet's
//	                  plugin registration (k8s.io/kubelet/pkg/apis/pluginregistration/v1)
//	                  on -registration-dir, as node-driver-registrar does
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

const version = "0.1.0"

type identity struct {
	csi.UnimplementedIdentityServer
	name       string
	controller bool
}

func (i *identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: i.name, VendorVersion: version}, nil
}

func (i *identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	resp := &csi.GetPluginCapabilitiesResponse{}
	if i.controller {
		resp.Capabilities = append(resp.Capabilities, &csi.PluginCapability{
			Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
				Type: csi.PluginCapability_Service_CONTROLLER_SERVICE}}})
	}
	return resp, nil
}

func (i *identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

type controller struct {
	csi.UnimplementedControllerServer
}

func (c *controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: []*csi.ControllerServiceCapability{{
		Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{
			Type: csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME}}}}}, nil
}

func (c *controller) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and node_id are required")
	}
	log.Printf("attach %s to %s", req.GetVolumeId(), req.GetNodeId())
	return &csi.ControllerPublishVolumeResponse{}, nil
}

func (c *controller) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	log.Printf("detach %s from %s", req.GetVolumeId(), req.GetNodeId())
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

type node struct {
	csi.UnimplementedNodeServer
	id      string
	dataDir string
}

func (n *node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

func (n *node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: n.id}, nil
}

// NodePublishVolume binds the volume's folder onto the pod's volume path.
func (n *node) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	if id == "" || target == "" || filepath.Base(id) != id {
		return nil, status.Error(codes.InvalidArgument, "a volume_id without '/' and a target_path are required")
	}
	source := filepath.Join(n.dataDir, id)
	for _, dir := range []string{source, target} {
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	if err := os.Chmod(source, 0o777); err != nil { // any pod's user may write, as on a fresh disk's root
		return nil, status.Error(codes.Internal, err.Error())
	}
	if mounted(target) {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	flags := uintptr(unix.MS_BIND)
	if err := unix.Mount(source, target, "", flags, ""); err != nil {
		return nil, status.Error(codes.Internal, fmt.Sprintf("bind %s on %s: %v", source, target, err))
	}
	if req.GetReadonly() {
		if err := unix.Mount("", target, "", flags|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	log.Printf("publish %s on %s", id, target)
	return &csi.NodePublishVolumeResponse{}, nil
}

func (n *node) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	target := req.GetTargetPath()
	if mounted(target) {
		if err := unix.Unmount(target, 0); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	log.Printf("unpublish %s from %s", req.GetVolumeId(), target)
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// mounted: the path is a mount point (/proc/self/mountinfo's fifth field).
func mounted(path string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

// registration answers the kubelet's plugin watcher, as node-driver-registrar does.
type registration struct {
	registerapi.UnimplementedRegistrationServer
	name, endpoint string
}

func (r *registration) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.name, Endpoint: r.endpoint,
		SupportedVersions: []string{"1.0.0"}}, nil
}

func (r *registration) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if s.GetPluginRegistered() {
		log.Printf("registered with the kubelet")
	} else {
		log.Printf("the kubelet refused the registration: %s", s.GetError())
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

func listen(path string) net.Listener {
	_ = os.Remove(path)
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		log.Fatal(err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		log.Fatal(err)
	}
	return lis
}

func main() {
	mode := flag.String("mode", "", "controller or node")
	name := flag.String("name", "hostdir.csi.llmops.dev", "the driver's name (its CSIDriver's)")
	endpoint := flag.String("endpoint", "", "the CSI socket to serve")
	nodeID := flag.String("node-id", "", "node mode: this node's name")
	dataDir := flag.String("data-dir", "", "node mode: the folder holding the volumes' folders")
	regDir := flag.String("registration-dir", "", "node mode: the kubelet's plugins_registry folder")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	if *endpoint == "" || (*mode != "controller" && *mode != "node") {
		log.Fatal("need -mode controller|node and -endpoint")
	}
	srv := grpc.NewServer()
	csi.RegisterIdentityServer(srv, &identity{name: *name, controller: *mode == "controller"})
	var reg *grpc.Server
	if *mode == "controller" {
		csi.RegisterControllerServer(srv, &controller{})
	} else {
		if *nodeID == "" || *dataDir == "" || *regDir == "" {
			log.Fatal("node mode needs -node-id, -data-dir and -registration-dir")
		}
		csi.RegisterNodeServer(srv, &node{id: *nodeID, dataDir: *dataDir})
	}
	go func() { _ = srv.Serve(listen(*endpoint)) }()
	if *mode == "node" {
		reg = grpc.NewServer()
		registerapi.RegisterRegistrationServer(reg, &registration{name: *name, endpoint: *endpoint})
		regSock := filepath.Join(*regDir, "llmop-csi-reg.sock")
		go func() { _ = reg.Serve(listen(regSock)) }()
		defer os.Remove(regSock)
	}
	log.Printf("%s %s serving on %s", *name, *mode, *endpoint)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	<-signals
	srv.Stop()
	if reg != nil {
		reg.Stop()
	}
	_ = os.Remove(*endpoint)
}
