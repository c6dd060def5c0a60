package main

import (
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	prefetch = 10
	ackBatch = 4
)

// qosConsume consumes COUNT messages (default 2000) with Qos(10) and manual acks.
// It first holds a full window of 10 unacked deliveries and checks that no 11th
// arrives, then acks in batches of 4 (multiple=true), checking order and redelivery.
func qosConsume(host string, port int, count int) {
	if count == 0 {
		count = 2000
	}
	conn := dial(host, port, 0)
	defer conn.Close()
	ch := channel(conn)
	queue := declareQueue(ch, "qos")
	bodies := make([]string, count)
	for i := range bodies {
		bodies[i] = strconv.Itoa(i)
	}
	publishConfirmedBatch(ch, queue, bodies)

	must(ch.Qos(prefetch, 0, false), "basic.qos")
	deliveries, err := ch.Consume(queue, "go-qos-consumer", false, false, false, false, nil)
	must(err, "basic.consume")

	received, outOfOrder, redelivered, maxOutstanding := 0, 0, 0, 0
	var pending []uint64
	take := func(d amqp.Delivery) {
		if string(d.Body) != strconv.Itoa(received) {
			outOfOrder++
		}
		if d.Redelivered {
			redelivered++
		}
		received++
		pending = append(pending, d.DeliveryTag)
		if len(pending) > maxOutstanding {
			maxOutstanding = len(pending)
		}
	}
	ackPending := func() {
		must(ch.Ack(pending[len(pending)-1], true), "basic.ack")
		pending = pending[:0]
	}
	deadline := time.After(30 * time.Second)
	next := func(idle time.Duration) (amqp.Delivery, bool) {
		select {
		case d, ok := <-deliveries:
			check(ok, "delivery channel closed after %d deliveries", received)
			return d, true
		case <-time.After(idle):
			return amqp.Delivery{}, false
		case <-deadline:
			check(false, "timed out after %d of %d deliveries", received, count)
		}
		return amqp.Delivery{}, false
	}

	// A full window: the broker must stop at `prefetch` unacked deliveries.
	for received < prefetch {
		d, ok := next(10 * time.Second)
		check(ok, "only %d deliveries of the first window", received)
		take(d)
	}
	_, extra := next(300 * time.Millisecond)
	result("beyond_prefetch", extra)
	check(!extra, "a delivery beyond the prefetch window")
	ackPending()

	// The rest: ack every 4 deliveries, or what is pending after 20 ms without one.
	for received < count {
		if d, ok := next(20 * time.Millisecond); ok {
			take(d)
			if len(pending) < ackBatch {
				continue
			}
		}
		if len(pending) > 0 {
			ackPending()
		}
	}
	if len(pending) > 0 {
		ackPending()
	}
	must(ch.Cancel("go-qos-consumer", false), "basic.cancel")
	stray := 0
	for range deliveries { // closed by the client after cancel-ok
		stray++
	}
	q, err := ch.QueueDeclarePassive(queue, false, false, true, false, nil)
	must(err, "passive queue.declare")
	result("prefetch", prefetch)
	result("received", received)
	result("out_of_order", outOfOrder)
	result("redelivered", redelivered)
	result("max_outstanding", maxOutstanding)
	result("stray_after_cancel", stray)
	result("queue_messages_after", q.Messages)
	result("queue_consumers_after", q.Consumers)
	_, err = ch.QueueDelete(queue, false, false, false)
	must(err, "queue.delete")
}

// basicGet gets five messages one by one: message counts 4..0, then an empty get-empty.
func basicGet(host string, port int, _ int) {
	conn := dial(host, port, 0)
	defer conn.Close()
	ch := channel(conn)
	queue := declareQueue(ch, "get")
	publishConfirmed(ch, queue, "m0", "m1", "m2", "m3", "m4")

	var counts, tags []int
	bodies := ""
	var last uint64
	for i := 0; i < 5; i++ {
		d, ok, err := ch.Get(queue, false)
		must(err, "basic.get")
		check(ok, "basic.get-empty after %d messages", i)
		check(!d.Redelivered, "message %d redelivered", i)
		counts = append(counts, int(d.MessageCount))
		tags = append(tags, int(d.DeliveryTag))
		if i > 0 {
			bodies += ","
		}
		bodies += string(d.Body)
		last = d.DeliveryTag
	}
	_, ok, err := ch.Get(queue, false)
	must(err, "basic.get on an empty queue")
	result("message_counts", joinInts(counts))
	result("delivery_tags", joinInts(tags))
	result("bodies", bodies)
	result("empty_ok", ok)
	must(ch.Ack(last, true), "basic.ack")
	result("queue_messages_after_ack", ready(ch, queue))
	_, err = ch.QueueDelete(queue, false, false, false)
	must(err, "queue.delete")
}

// publishConfirmedBatch publishes all bodies, then waits for every confirmation.
func publishConfirmedBatch(ch *amqp.Channel, queue string, bodies []string) {
	must(ch.Confirm(false), "confirm.select")
	published := ch.NotifyPublish(make(chan amqp.Confirmation, len(bodies)))
	for _, body := range bodies {
		must(ch.Publish("", queue, false, false, text(body)), "publish")
	}
	timeout := time.After(30 * time.Second)
	for range bodies {
		select {
		case c := <-published:
			check(c.Ack, "publish %d nacked", c.DeliveryTag)
		case <-timeout:
			check(false, "publishes not confirmed within 30 s")
		}
	}
}
