package main

import "time"

// transactions: on a Tx channel a rolled-back publish never reaches the queue and a
// committed one does (not before the commit); a rolled-back ack leaves the message
// unacked, so closing the channel requeues it as redelivered; a committed ack removes
// it. Queue counts come from passive declares on a second, non-transactional channel.
func transactions(host string, port int, _ int) {
	conn := dial(host, port, 0)
	defer conn.Close()
	observer := channel(conn)
	queue := declareQueue(observer, "tx")

	tx := channel(conn)
	must(tx.Tx(), "tx.select")
	must(tx.Publish("", queue, false, false, text("rolled-back")), "publish")
	must(tx.TxRollback(), "tx.rollback")
	result("ready_after_rollback", ready(observer, queue))

	must(tx.Publish("", queue, false, false, text("committed")), "publish")
	result("ready_before_commit", ready(observer, queue))
	must(tx.TxCommit(), "tx.commit")
	result("ready_after_commit", ready(observer, queue))

	d, ok, err := tx.Get(queue, false)
	must(err, "basic.get")
	check(ok, "basic.get-empty after the commit")
	result("tx_get_body", string(d.Body))
	must(tx.Ack(d.DeliveryTag, false), "basic.ack")
	must(tx.TxRollback(), "tx.rollback")
	result("ready_after_ack_rollback", ready(observer, queue))
	must(tx.Close(), "channel.close") // the unacked message goes back to the queue

	// RabbitMQ requeues a closed channel's unacked messages asynchronously (its queue
	// hears of the channel's end after Close-Ok): wait for the message, bounded
	again, ok, err := observer.Get(queue, false)
	for deadline := time.Now().Add(10 * time.Second); err == nil && !ok && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		again, ok, err = observer.Get(queue, false)
	}
	must(err, "basic.get")
	check(ok, "the message was not requeued on channel close")
	result("requeued_body", string(again.Body))
	result("requeued_redelivered", again.Redelivered)
	must(observer.Reject(again.DeliveryTag, true), "basic.reject")

	tx2 := channel(conn)
	must(tx2.Tx(), "tx.select")
	third, ok, err := tx2.Get(queue, false)
	must(err, "basic.get")
	check(ok, "basic.get-empty after the reject")
	must(tx2.Ack(third.DeliveryTag, false), "basic.ack")
	result("ready_after_ack_before_commit", ready(observer, queue))
	must(tx2.TxCommit(), "tx.commit")
	must(tx2.Close(), "channel.close")
	result("ready_after_ack_commit", ready(observer, queue))
	_, err = observer.QueueDelete(queue, false, false, false)
	must(err, "queue.delete")
}
