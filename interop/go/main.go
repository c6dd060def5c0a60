// Command warren-go-interop exercises an AMQP 0-9-1 broker (Warren or RabbitMQ) through
// the rabbitmq/amqp091-go client. Usage:
//
//	warren-go-interop SCENARIO HOST PORT [COUNT]
//
// It prints `RESULT key=value` lines, then `DONE SCENARIO` and exits 0; a failed check or
// error prints `FAIL SCENARIO: reason` and exits 1. See README.md for the scenarios.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Whole-program limit: the client has no RPC timeouts, so a silent broker would hang it.
const programTimeout = 60 * time.Second

var scenarios = map[string]func(host string, port int, count int){
	"confirms":  confirms,
	"return":    mandatoryReturn,
	"qos":       qosConsume,
	"get":       basicGet,
	"tx":        transactions,
	"errors":    channelErrors,
	"heartbeat": heartbeat,
}

// failure is the panic value of a failed check.
type failure string

func main() {
	if len(os.Args) < 4 || scenarios[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: warren-go-interop SCENARIO HOST PORT [COUNT]")
		os.Exit(2)
	}
	name, host := os.Args[1], os.Args[2]
	port, err := strconv.Atoi(os.Args[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bad port:", os.Args[3])
		os.Exit(2)
	}
	count := 0
	if len(os.Args) > 4 {
		if count, err = strconv.Atoi(os.Args[4]); err != nil {
			fmt.Fprintln(os.Stderr, "bad count:", os.Args[4])
			os.Exit(2)
		}
	}
	time.AfterFunc(programTimeout, func() {
		fmt.Printf("FAIL %s: still running after %s\n", name, programTimeout)
		os.Exit(1)
	})
	defer func() {
		if r := recover(); r != nil {
			fmt.Printf("FAIL %s: %v\n", name, r)
			os.Exit(1)
		}
	}()
	scenarios[name](host, port, count)
	fmt.Println("DONE " + name)
}

// dial connects as guest/guest to vhost "/" with the given heartbeat (0: the server's).
func dial(host string, port int, heartbeat time.Duration) *amqp.Connection {
	url := fmt.Sprintf("amqp://guest:guest@%s/", net.JoinHostPort(host, strconv.Itoa(port)))
	conn, err := amqp.DialConfig(url, amqp.Config{
		Heartbeat: heartbeat,
		Dial:      amqp.DefaultDial(5 * time.Second),
	})
	must(err, "dial")
	return conn
}

func channel(conn *amqp.Connection) *amqp.Channel {
	ch, err := conn.Channel()
	must(err, "open channel")
	return ch
}

// declareQueue declares a queue with a unique name, exclusive to the connection (so the
// broker deletes it with the connection even when a scenario fails halfway).
func declareQueue(ch *amqp.Channel, prefix string) string {
	q, err := ch.QueueDeclare(unique(prefix), false, false, true, false, nil)
	must(err, "queue.declare")
	return q.Name
}

// ready is the queue's ready message count, from a passive declare.
func ready(ch *amqp.Channel, queue string) int {
	q, err := ch.QueueDeclarePassive(queue, false, false, true, false, nil)
	must(err, "passive queue.declare")
	return q.Messages
}

// publishConfirmed publishes the bodies to the default exchange on a confirm-mode
// channel, each acked before the next is sent. It waits on a NotifyPublish listener, not
// on a DeferredConfirmation: client 1.5.0 registers the DeferredConfirmation after it
// sent the publish, so an ack that is handled first is lost and Wait never returns
// (rabbitmq/amqp091-go#182), which a loaded machine makes likely. The listener stays
// registered: publish nothing more on `ch` afterwards.
func publishConfirmed(ch *amqp.Channel, queue string, bodies ...string) {
	must(ch.Confirm(false), "confirm.select")
	published := ch.NotifyPublish(make(chan amqp.Confirmation, len(bodies)))
	for _, body := range bodies {
		must(ch.Publish("", queue, false, false, text(body)), "publish")
		select {
		case c := <-published:
			check(c.Ack, "publish of %q nacked", body)
		case <-time.After(10 * time.Second):
			check(false, "publish of %q not confirmed within 10 s", body)
		}
	}
}

// How a deferred confirmation ended within waitDeferred's timeout.
type deferredOutcome int

const (
	deferredAck deferredOutcome = iota
	deferredNack
	deferredUnsettled
)

// waitDeferred waits up to `timeout` for a deferred confirmation.
func waitDeferred(dc *amqp.DeferredConfirmation, timeout time.Duration) deferredOutcome {
	done := make(chan bool, 1)
	go func() { done <- dc.Wait() }()
	select {
	case ack := <-done:
		if ack {
			return deferredAck
		}
		return deferredNack
	case <-time.After(timeout):
		return deferredUnsettled
	}
}

func text(body string) amqp.Publishing {
	return amqp.Publishing{ContentType: "text/plain", Body: []byte(body)}
}

// unique is a queue/exchange name no other run uses.
func unique(prefix string) string {
	b := make([]byte, 8)
	_, err := rand.Read(b)
	must(err, "random name")
	return "go-" + prefix + "-" + hex.EncodeToString(b)
}

func result(key string, value interface{}) {
	fmt.Printf("RESULT %s=%v\n", key, value)
}

func joinInts(values []int) string {
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func check(ok bool, format string, args ...interface{}) {
	if !ok {
		panic(failure(fmt.Sprintf(format, args...)))
	}
}

func must(err error, what string) {
	if err != nil {
		panic(failure(fmt.Sprintf("%s: %v", what, err)))
	}
}
