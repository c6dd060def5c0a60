package main

import (
	"errors"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// channelErrors provokes channel errors and reports what the client sees as *amqp.Error:
// 404 on a passive declare of a missing queue (an RPC's error), 403 on declaring an
// "amq." exchange, 406 on acking a delivery tag twice (an async close, via NotifyClose).
// The connection survives them all; a closed channel's calls fail with amqp.ErrClosed.
func channelErrors(host string, port int, _ int) {
	conn := dial(host, port, 0)
	defer conn.Close()

	ch := channel(conn)
	missing := unique("missing")
	result("passive_missing_name", missing)
	_, err := ch.QueueDeclarePassive(missing, false, false, false, false, nil)
	report("passive_missing", err)
	result("passive_missing_channel_closed", ch.IsClosed())
	_, err = ch.QueueDeclare(unique("after-close"), false, true, false, false, nil)
	result("closed_channel_error_is_err_closed", errors.Is(err, amqp.ErrClosed))

	ch = channel(conn)
	reserved := "amq." + unique("reserved")
	result("reserved_exchange_name", reserved)
	report("reserved_exchange", ch.ExchangeDeclare(reserved, "direct", false, true, false, false, nil))

	ch = channel(conn)
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	queue := declareQueue(ch, "double-ack")
	publishConfirmed(ch, queue, "once")
	d, ok, err := ch.Get(queue, false)
	must(err, "basic.get")
	check(ok, "basic.get-empty")
	result("double_ack_tag", d.DeliveryTag)
	must(ch.Ack(d.DeliveryTag, false), "first basic.ack")
	must(ch.Ack(d.DeliveryTag, false), "second basic.ack") // no reply: the error is async
	select {
	case e := <-closed:
		report("double_ack", e)
	case <-time.After(10 * time.Second):
		check(false, "no channel close within 10 s of the double ack")
	}

	result("connection_open", !conn.IsClosed())
	ch = channel(conn)
	result("queue_messages_after", ready(ch, queue))
	_, err = ch.QueueDelete(queue, false, false, false)
	must(err, "queue.delete")
	result("new_channel_works", true)
}

// report prints the code, reason and Server flag of an expected *amqp.Error.
func report(name string, err error) {
	var e *amqp.Error
	check(errors.As(err, &e), "%s: want an *amqp.Error, got %T %v", name, err, err)
	result(name+"_code", e.Code)
	result(name+"_reason", e.Reason)
	result(name+"_server", e.Server)
	result(name+"_recover", e.Recover)
}
