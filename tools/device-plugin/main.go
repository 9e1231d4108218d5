// Command device-plugin advertises stand-in devices of one extended resource (by default
// nvidia.com/gpu, 8 of them) to the kubelet through its device-plugin API
// (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1), as NVIDIA's plugin does for real GPUs.
// There are no devices behind the IDs: the point is that the kubelet itself counts,
// admits and allocates the resource (node capacity and allocatable, the device manager's
// checkpoint, Allocate per container), instead of a patched node status.
//
// The kubelet removes every socket in its device-plugin folder when it starts, so the
// plugin watches its own socket and the kubelet's: when either is replaced, it serves
// again and registers again (the nodes tier restarts the kubelet).
//
// Allocate gives each container NVIDIA_VISIBLE_DEVICES=<the IDs>, the variable NVIDIA's
// plugin sets, so a test can read what the kubelet allocated from inside the container.
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
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
	stop    chan struct{}
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once (they never change) and holds the stream open
// until the kubelet closes it or the plugin serves anew.
func (p *plugin) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	select {
	case <-s.Context().Done():
	case <-p.stop:
	}
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.GetContainerRequests() {
		ids := c.GetDevicesIds()
		log.Printf("allocate %s", strings.Join(ids, ","))
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(ids, ",")},
		})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

// identity says when a file was replaced (another inode) or removed ("").
func identity(path string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return ""
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// serve listens on the plugin's socket and registers it with the kubelet.
func serve(p *plugin, dir, endpoint, resource string) (*grpc.Server, error) {
	sock := filepath.Join(dir, endpoint)
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource,
		Options: &pluginapi.DevicePluginOptions{},
	})
	if err != nil {
		srv.Stop()
		return nil, err
	}
	return srv, nil
}

func main() {
	resource := flag.String("resource", "nvidia.com/gpu", "the extended resource to advertise")
	count := flag.Int("count", 8, "how many devices")
	prefix := flag.String("id-prefix", "gpu-", "device IDs: the prefix, then 0..count-1")
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin folder")
	endpoint := flag.String("socket", "llmop-gpu.sock", "this plugin's socket in that folder")
	flag.Parse()
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)

	devices := make([]*pluginapi.Device, *count)
	for i := range devices {
		devices[i] = &pluginapi.Device{ID: fmt.Sprintf("%s%d", *prefix, i), Health: pluginapi.Healthy}
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	kubelet := filepath.Join(*dir, "kubelet.sock")
	sock := filepath.Join(*dir, *endpoint)
	for {
		// Wait for the kubelet's socket, then serve and register until that works.
		p := &plugin{devices: devices, stop: make(chan struct{})}
		var srv *grpc.Server
		for srv == nil {
			if identity(kubelet) != "" {
				var err error
				if srv, err = serve(p, *dir, *endpoint, *resource); err != nil {
					log.Printf("register: %v (retrying)", err)
				}
			}
			if srv == nil {
				select {
				case <-signals:
					_ = os.Remove(sock)
					return
				case <-time.After(500 * time.Millisecond):
				}
			}
		}
		mine, theirs := identity(sock), identity(kubelet)
		log.Printf("registered %d x %s with the kubelet (%s)", *count, *resource, sock)
		for identity(sock) == mine && identity(kubelet) == theirs {
			select {
			case <-signals:
				close(p.stop)
				srv.Stop()
				_ = os.Remove(sock)
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
		log.Printf("the kubelet's folder changed (a kubelet restart): serving and registering again")
		close(p.stop)
		srv.Stop()
	}
}
