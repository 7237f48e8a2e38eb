package explorer

import (
	"net"
	"testing"
)

func TestURL(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := URL(ln.Addr()); got != "http://"+ln.Addr().String()+"/" {
		t.Errorf("URL = %q", got)
	}
}
