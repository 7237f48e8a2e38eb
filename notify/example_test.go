package notify_test

import (
	"context"
	"fmt"
	"github.com/localcloud/localcloud/internal/hintserver"
	"time"

	"github.com/localcloud/localcloud/notify"
)

func ExampleSubject() {
	fmt.Println(notify.Subject("shop", "orders"))
	// Output: localcloud.shop.orders.available
}

// The wiring of `localcloud up` and of a consumer, in one process for the example.
func Example() {
	ctx := context.Background()

	// localcloud up: the server, and a publisher on an in-process connection.
	srv, err := hintserver.StartServer(ctx, hintserver.ServerOptions{Listen: "127.0.0.1:0", Token: "t"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	pub := notify.NewPublisher(nc, notify.PublisherOptions{})
	defer pub.Close()

	// A consumer: wake a receive loop that also polls on its own.
	subject := notify.Subject("shop", "orders")
	wake := make(chan struct{}, 1)
	stop, err := notify.Watch(ctx, srv.URL(), "t", subject, func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	// After each commit that makes a message due:
	for {
		pub.Notify(subject, notify.DueUnknown)
		select {
		case <-wake:
			fmt.Println("woken")
			return
		case <-time.After(50 * time.Millisecond): // the subscription may not be registered yet
		}
	}
	// Output: woken
}
