// Package netutil holds small networking helpers the demo and the tests share.
package netutil

import "net"

// LoopbackListen listens on 127.0.0.1 when addr asks for all interfaces:
// the in-process kfake brokers of the demo and the tests answer on
// loopback only. It fits kfake.ListenFn.
func LoopbackListen(network, addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return net.Listen(network, net.JoinHostPort(host, port))
}
