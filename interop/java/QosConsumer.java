import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * basicQos(PREFETCH) with a DefaultConsumer and manual acks sent from another thread in
 * batches. The consumer counts outstanding (delivered, not yet acked) messages on each
 * delivery; the acker decrements that count *before* sending the ack, so the count never
 * exceeds what the broker holds as unacked and max_outstanding <= PREFETCH must hold.
 * Usage: java QosConsumer HOST PORT [COUNT]   (COUNT defaults to 2000)
 */
public class QosConsumer {
    static final int PREFETCH = 10;
    static final int BATCH = 4;

    public static void main(String[] args) {
        int count = args.length > 2 ? Integer.parseInt(args[2]) : 2000;
        Interop.main("QosConsumer", args, (host, port) -> {
            try (Connection connection = Interop.factory(host, port).newConnection()) {
                run(connection, count);
            }
        });
    }

    static void run(Connection connection, int count) throws Exception {
        Channel channel = connection.createChannel();
        String queue = Interop.unique("java-qos");
        channel.queueDeclare(queue, false, true, false, null);
        channel.confirmSelect();
        for (int i = 0; i < count; i++) {
            channel.basicPublish("", queue, null, Integer.toString(i).getBytes(StandardCharsets.UTF_8));
        }
        channel.waitForConfirmsOrDie(30_000);

        Object lock = new Object();
        List<Long> pendingTags = new ArrayList<>();
        int[] state = new int[5];   // outstanding, maxOutstanding, received, outOfOrder, redelivered
        channel.basicQos(PREFETCH);
        channel.basicConsume(queue, false, new DefaultConsumer(channel) {
            @Override
            public void handleDelivery(String tag, Envelope envelope, AMQP.BasicProperties props,
                                       byte[] body) {
                int value = Integer.parseInt(new String(body, StandardCharsets.UTF_8));
                synchronized (lock) {
                    state[0]++;
                    state[1] = Math.max(state[1], state[0]);
                    if (value != state[2]) {
                        state[3]++;
                    }
                    if (envelope.isRedeliver()) {
                        state[4]++;
                    }
                    state[2]++;
                    pendingTags.add(envelope.getDeliveryTag());
                    lock.notifyAll();
                }
            }
        });

        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        int acked = 0;
        int ackFrames = 0;
        while (acked < count) {
            long lastTag;
            int n;
            synchronized (lock) {
                // Wait for a full batch; take a partial one after 20 ms without a delivery.
                while (pendingTags.size() < BATCH) {
                    long remaining = deadline - System.nanoTime();
                    if (remaining <= 0) {
                        throw new AssertionError("timed out: acked " + acked + " of " + count);
                    }
                    int before = pendingTags.size();
                    lock.wait(20);
                    if (pendingTags.size() == before && before > 0) {
                        break;
                    }
                }
                n = pendingTags.size();
                lastTag = pendingTags.get(n - 1);
                pendingTags.clear();
                state[0] -= n;   // before the ack is sent: see the class comment
            }
            channel.basicAck(lastTag, true);
            acked += n;
            ackFrames++;
        }
        // A round trip after the last ack: a stray extra delivery would be counted below.
        int left = channel.queueDeclarePassive(queue).getMessageCount();
        synchronized (lock) {
            Interop.result("prefetch", PREFETCH);
            Interop.result("max_outstanding", state[1]);
            Interop.result("received", state[2]);
            Interop.result("out_of_order", state[3]);
            Interop.result("redelivered", state[4]);
        }
        Interop.result("ack_frames", ackFrames);
        Interop.result("queue_messages_after", left);
        channel.queueDelete(queue);
        channel.close();
    }
}
