package checkout_test

import (
	"context"
	"testing"
	"time"

	"github.com/localcloud/localcloud/examples/checkout"
	"github.com/localcloud/localcloud/localcloudtest"
)

// TestCheckout runs examples/stack.yaml in process (its own data dir and NATS
// port, stopped and removed when the test ends), puts a cart, runs the app
// code, and checks the order it sent.
func TestCheckout(t *testing.T) {
	s := localcloudtest.Start(t, "../stack.yaml")
	ctx := context.Background()

	if _, err := s.KV("carts").Put(ctx, "cart:1", []byte(`["tea","cups"]`)); err != nil {
		t.Fatal(err)
	}
	if err := checkout.Checkout(ctx, "cart:1"); err != nil {
		t.Fatal(err)
	}

	msgs, err := s.Queue("orders").ReceiveWait(ctx, 1, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("got %d orders, want 1", len(msgs))
	}
	var o checkout.Order
	if err := msgs[0].Payload.Decode(&o); err != nil {
		t.Fatal(err)
	}
	if o.Cart != "cart:1" || len(o.Items) != 2 || o.Items[0] != "tea" {
		t.Errorf("order = %+v, want cart:1 with tea and cups", o)
	}
	if _, found, err := s.KV("carts").Get(ctx, "cart:1"); err != nil || found {
		t.Errorf("cart:1 after checkout: found %v, err %v; want it deleted", found, err)
	}
	if err := s.Queue("orders").Ack(ctx, msgs[0].ReceiptHandle); err != nil {
		t.Fatal(err)
	}
}
