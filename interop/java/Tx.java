import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.GetResponse;

import java.nio.charset.StandardCharsets;

/**
 * Transactions. On a txSelect'ed channel: a rolled-back publish never reaches the queue;
 * a committed one does (and not before the commit); an ack rolled back leaves the message
 * unacked, so closing the channel requeues it as redelivered; an ack committed removes it.
 * Queue counts are read with passive declares on a second, non-transactional channel.
 */
public class Tx {
    public static void main(String[] args) {
        Interop.main("Tx", args, (host, port) -> {
            try (Connection connection = Interop.factory(host, port).newConnection()) {
                Channel observer = connection.createChannel();
                String queue = Interop.unique("java-tx");
                observer.queueDeclare(queue, false, false, true, null);

                Channel tx = connection.createChannel();
                tx.txSelect();
                tx.basicPublish("", queue, null, bytes("rolled-back"));
                tx.txRollback();
                Interop.result("ready_after_rollback", ready(observer, queue));

                tx.basicPublish("", queue, null, bytes("committed"));
                Interop.result("ready_before_commit", ready(observer, queue));
                tx.txCommit();
                Interop.result("ready_after_commit", ready(observer, queue));

                GetResponse got = tx.basicGet(queue, false);
                Interop.check(got != null, "basicGet returned null after the commit");
                Interop.result("tx_get_body", text(got));
                tx.basicAck(got.getEnvelope().getDeliveryTag(), false);
                tx.txRollback();
                Interop.result("ready_after_ack_rollback", ready(observer, queue));
                tx.close();   // the unacked message goes back to the queue

                // RabbitMQ requeues a closed channel's unacked messages asynchronously
                // (the queue hears of the channel's end after Close-Ok): wait, bounded.
                GetResponse again = observer.basicGet(queue, false);
                long deadline = System.nanoTime() + 10_000_000_000L;
                while (again == null && System.nanoTime() < deadline) {
                    Thread.sleep(10);
                    again = observer.basicGet(queue, false);
                }
                Interop.check(again != null, "the message was not requeued on channel close");
                Interop.result("requeued_body", text(again));
                Interop.result("requeued_redelivered", again.getEnvelope().isRedeliver());
                observer.basicReject(again.getEnvelope().getDeliveryTag(), true);

                Channel tx2 = connection.createChannel();
                tx2.txSelect();
                GetResponse third = tx2.basicGet(queue, false);
                Interop.check(third != null, "basicGet returned null after the reject");
                tx2.basicAck(third.getEnvelope().getDeliveryTag(), false);
                tx2.txCommit();
                tx2.close();
                Interop.result("ready_after_ack_commit", ready(observer, queue));
                observer.queueDelete(queue);
            }
        });
    }

    static int ready(Channel channel, String queue) throws Exception {
        return channel.queueDeclarePassive(queue).getMessageCount();
    }

    static byte[] bytes(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }

    static String text(GetResponse response) {
        return new String(response.getBody(), StandardCharsets.UTF_8);
    }
}
