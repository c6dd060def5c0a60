package main

import (
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const idle = 4 * time.Second

// heartbeat connects with Config{Heartbeat: 1s}, stays idle for 4 s and checks the
// connection is still open and usable. The client sends a heartbeat every 0.5 s and
// drops the connection if it reads nothing from the broker for 1.5 s, so this needs
// the broker to send heartbeats too.
func heartbeat(host string, port int, _ int) {
	conn := dial(host, port, time.Second)
	defer conn.Close()
	result("heartbeat_seconds", conn.Config.Heartbeat.Seconds())
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	ch := channel(conn)
	queue := declareQueue(ch, "heartbeat")

	select {
	case e := <-closed:
		result("closed_during_idle", e)
		check(false, "connection closed while idle: %v", e)
	case <-time.After(idle):
		result("closed_during_idle", "none")
	}
	result("open_after_idle", !conn.IsClosed())
	publishConfirmed(ch, queue, "still-alive")
	d, ok, err := ch.Get(queue, true)
	must(err, "basic.get")
	check(ok, "basic.get-empty")
	result("get_body", string(d.Body))
	_, err = ch.QueueDelete(queue, false, false, false)
	must(err, "queue.delete")
	result("open_at_end", !conn.IsClosed())
}
