import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.ConfirmListener;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.MessageProperties;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.NavigableSet;
import java.util.concurrent.ConcurrentSkipListSet;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Publisher confirms.
 * Async: publish COUNT messages to a queue with a ConfirmListener; an ack or nack with
 * multiple=true covers every still-unconfirmed sequence number up to its delivery tag.
 * Sync: publish, waitForConfirmsOrDie, one message at a time.
 * Returns: a mandatory unroutable publish gets basic.return 312 NO_ROUTE, then its ack.
 * Usage: java Confirms HOST PORT [COUNT]   (COUNT defaults to 100000)
 */
public class Confirms {
    public static void main(String[] args) {
        int count = args.length > 2 ? Integer.parseInt(args[2]) : 100_000;
        Interop.main("Confirms", args, (host, port) -> {
            try (Connection connection = Interop.factory(host, port).newConnection()) {
                asyncConfirms(connection, count);
                syncConfirms(connection);
                mandatoryReturn(connection);
            }
        });
    }

    static void asyncConfirms(Connection connection, int count) throws Exception {
        Channel channel = connection.createChannel();
        String queue = Interop.unique("java-confirms");
        channel.queueDeclare(queue, false, true, false, null);
        channel.confirmSelect();
        NavigableSet<Long> unconfirmed = new ConcurrentSkipListSet<>();
        AtomicLong acked = new AtomicLong();
        AtomicLong nacked = new AtomicLong();
        AtomicLong unknown = new AtomicLong();   // confirms for tags already confirmed
        AtomicLong multipleFrames = new AtomicLong();
        channel.addConfirmListener(new ConfirmListener() {
            public void handleAck(long tag, boolean multiple) {
                acked.addAndGet(settle(tag, multiple));
            }

            public void handleNack(long tag, boolean multiple) {
                nacked.addAndGet(settle(tag, multiple));
            }

            private long settle(long tag, boolean multiple) {
                if (multiple) {
                    multipleFrames.incrementAndGet();
                    NavigableSet<Long> covered = unconfirmed.headSet(tag, true);
                    long n = covered.size();
                    covered.clear();
                    return n;
                }
                if (unconfirmed.remove(tag)) {
                    return 1;
                }
                unknown.incrementAndGet();
                return 0;
            }
        });
        byte[] body = "confirm-me".getBytes(StandardCharsets.UTF_8);
        long started = System.nanoTime();
        for (int i = 0; i < count; i++) {
            unconfirmed.add(channel.getNextPublishSeqNo());
            channel.basicPublish("", queue, null, body);
        }
        boolean allAcked = channel.waitForConfirms(60_000);
        long elapsedMs = (System.nanoTime() - started) / 1_000_000;
        // The listener has run for every confirm once waitForConfirms returned.
        Interop.result("async_wait_for_confirms", allAcked);
        Interop.result("async_acked", acked.get());
        Interop.result("async_nacked", nacked.get());
        Interop.result("async_unknown_tags", unknown.get());
        Interop.result("async_unconfirmed", unconfirmed.size());
        Interop.result("async_multiple_frames", multipleFrames.get());
        Interop.result("async_next_publish_seq_no", channel.getNextPublishSeqNo());
        Interop.result("async_queue_messages", channel.queueDeclarePassive(queue).getMessageCount());
        Interop.result("async_elapsed_ms", elapsedMs);
        channel.queueDelete(queue);
        channel.close();
    }

    static void syncConfirms(Connection connection) throws Exception {
        Channel channel = connection.createChannel();
        String queue = Interop.unique("java-confirms-sync");
        channel.queueDeclare(queue, false, true, false, null);
        channel.confirmSelect();
        int confirmed = 0;
        for (int i = 0; i < 10; i++) {
            channel.basicPublish("", queue, MessageProperties.PERSISTENT_TEXT_PLAIN,
                    ("sync-" + i).getBytes(StandardCharsets.UTF_8));
            channel.waitForConfirmsOrDie(5_000);   // throws on nack or timeout
            confirmed++;
        }
        Interop.result("sync_confirmed", confirmed);
        Interop.result("sync_next_publish_seq_no", channel.getNextPublishSeqNo());
        Interop.result("sync_queue_messages", channel.queueDeclarePassive(queue).getMessageCount());
        channel.queueDelete(queue);
        channel.close();
    }

    static void mandatoryReturn(Connection connection) throws Exception {
        Channel channel = connection.createChannel();
        channel.confirmSelect();
        List<String> events = new CopyOnWriteArrayList<>();
        channel.addReturnListener((code, text, exchange, routingKey, props, body) ->
                events.add("return:" + code + ":" + text + ":" + exchange + ":"
                        + new String(body, StandardCharsets.UTF_8)));
        channel.addConfirmListener(new ConfirmListener() {
            public void handleAck(long tag, boolean multiple) {
                events.add("ack:" + tag);
            }

            public void handleNack(long tag, boolean multiple) {
                events.add("nack:" + tag);
            }
        });
        channel.basicPublish("amq.direct", Interop.unique("nowhere"), true,
                new AMQP.BasicProperties(), "unroutable".getBytes(StandardCharsets.UTF_8));
        channel.waitForConfirmsOrDie(5_000);
        Interop.result("return_events", String.join(",", events));
        channel.close();
    }
}
