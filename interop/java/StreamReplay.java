import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.MessageProperties;
import com.rabbitmq.client.ShutdownSignalException;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.Date;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * Stream queues (x-queue-type=stream) replayed through basic.consume.
 * A durable stream gets COUNT messages (body "stream-OFFSET") with publisher confirms; then:
 *  first:      x-stream-offset "first", basicQos(100), manual acks: offsets 0..COUNT-1 in
 *              order (delivery header x-stream-offset, a Long), bodies as published;
 *  offset:     x-stream-offset COUNT/2 (a long): deliveries start exactly there;
 *  concurrent: "first" and COUNT-10 at the same time on two channels, both complete;
 *  timestamp:  a second batch published once the wall-clock second has ticked over after
 *              the first batch was confirmed; x-stream-offset = java.util.Date of that
 *              second (AMQP timestamp, seconds) starts inside the second batch;
 *  get:        basic.get on a stream closes the connection with 540 NOT_IMPLEMENTED;
 *  autoack:    basic.consume with autoAck=true: RabbitMQ 3.10 closes the connection with
 *              540 NOT_IMPLEMENTED too (a connection error, not a 406 channel error).
 * get and autoack each use a connection of their own; the main one must stay open.
 * The stream is deleted at the end (also, best effort, after a failure).
 * Usage: java StreamReplay HOST PORT [COUNT]   (COUNT defaults to 10000, at least 20)
 */
public class StreamReplay {
    static final int PREFETCH = 100;
    static final int BATCH2 = 100;
    static final long WAIT_SECONDS = 30;

    public static void main(String[] args) {
        int count = args.length > 2 ? Integer.parseInt(args[2]) : 10_000;
        Interop.main("StreamReplay", args, (host, port) -> {
            Interop.check(count >= 20, "COUNT must be at least 20");
            String queue = Interop.unique("java-stream");
            Interop.result("queue", queue);
            try (Connection connection = Interop.factory(host, port).newConnection()) {
                run(host, port, connection, queue, count);
            } finally {
                deleteQuietly(host, port, queue);
            }
        });
    }

    static void run(String host, int port, Connection connection, String queue, int count)
            throws Exception {
        Channel channel = connection.createChannel();
        Map<String, Object> queueArgs = Collections.singletonMap("x-queue-type", "stream");
        AMQP.Queue.DeclareOk declared = channel.queueDeclare(queue, true, false, false, queueArgs);
        Interop.result("declared_queue", declared.getQueue().equals(queue));
        publish(channel, queue, 0, count);
        Interop.result("published", count);

        // 1. From the first offset.
        StreamConsumer first = consume(connection, queue, "first", 0L, count);
        first.await();
        first.finish();
        first.report("first");

        // 2. From a numeric offset.
        long middle = count / 2;
        StreamConsumer fromOffset = consume(connection, queue, middle, middle, count - middle);
        fromOffset.await();
        fromOffset.finish();
        fromOffset.report("offset");

        // 3. Two consumers at different offsets at the same time, on two channels.
        StreamConsumer whole = consume(connection, queue, "first", 0L, count);
        StreamConsumer tail = consume(connection, queue, (long) (count - 10), (long) (count - 10), 10);
        Interop.result("concurrent_both_started", whole.consumerTag != null && tail.consumerTag != null);
        tail.await();
        whole.await();
        tail.finish();
        whole.finish();
        whole.report("concurrent_first");
        tail.report("concurrent_tail");

        // 4. From a timestamp: batch 2 is published after the wall-clock second ticks over.
        long boundaryMs = (System.currentTimeMillis() / 1000 + 1) * 1000;
        while (System.currentTimeMillis() < boundaryMs) {
            Thread.sleep(Math.max(1, boundaryMs - System.currentTimeMillis()));
        }
        long batch2PublishStartMs = System.currentTimeMillis();
        publish(channel, queue, count, BATCH2);
        Interop.result("timestamp_seconds", boundaryMs / 1000);
        Interop.result("timestamp_batch2_published_after_boundary", batch2PublishStartMs >= boundaryMs);
        Interop.result("timestamp_batch2_start", count);
        Interop.result("timestamp_batch2_count", BATCH2);
        // Expected start unknown up front (seconds precision): the end must be the last offset.
        StreamConsumer fromTime = consume(connection, queue, new Date(boundaryMs), null, -1);
        fromTime.awaitOffset(count + BATCH2 - 1);
        fromTime.finish();
        fromTime.report("timestamp");
        channel.close();

        // 5. basic.get on a stream: connection error 540 NOT_IMPLEMENTED.
        try (Connection getConnection = Interop.factory(host, port).newConnection()) {
            Channel getChannel = getConnection.createChannel();
            ShutdownSignalException signal = Interop.expectShutdown(() -> getChannel.basicGet(queue, false));
            reportShutdown("get", signal);
            Interop.result("get_connection_open", getConnection.isOpen());
        } catch (ShutdownSignalException | IOException alreadyClosed) {
            // close() of a connection the broker already closed: nothing to do
        }

        // 6. basic.consume with autoAck=true: RabbitMQ 3.10 closes the *connection* with
        //    540 NOT_IMPLEMENTED (not a 406 channel error), so it gets its own connection.
        try (Connection autoAckConnection = Interop.factory(host, port).newConnection()) {
            Channel autoAck = autoAckConnection.createChannel();
            autoAck.basicQos(PREFETCH);   // so that auto-ack is the only thing wrong
            Map<String, Object> consumeArgs = Collections.singletonMap("x-stream-offset", "first");
            ShutdownSignalException signal = Interop.expectShutdown(() -> autoAck.basicConsume(
                    queue, true, consumeArgs, new DefaultConsumer(autoAck)));
            reportShutdown("autoack", signal);
            Interop.result("autoack_connection_open", autoAckConnection.isOpen());
        } catch (ShutdownSignalException | IOException alreadyClosed) {
            // close() of a connection the broker already closed: nothing to do
        }
        Interop.result("main_connection_open", connection.isOpen());

        // Delete, then check it is gone (passive declare: 404).
        Channel deleter = connection.createChannel();
        deleter.queueDelete(queue);
        Interop.result("deleted", true);
        Channel checker = connection.createChannel();
        ShutdownSignalException gone = Interop.expectShutdown(() -> checker.queueDeclarePassive(queue));
        reportShutdown("deleted_passive", gone);
    }

    /** Publish bodies "stream-FROM" .. "stream-(FROM+N-1)", then waitForConfirmsOrDie. */
    static void publish(Channel channel, String queue, long from, int n) throws Exception {
        channel.confirmSelect();
        for (long i = from; i < from + n; i++) {
            Map<String, Object> headers = new HashMap<>();
            headers.put("seq", i);
            AMQP.BasicProperties props = MessageProperties.PERSISTENT_BASIC.builder()
                    .headers(headers).build();
            channel.basicPublish("", queue, props, body(i));
        }
        channel.waitForConfirmsOrDie(30_000);
    }

    static byte[] body(long offset) {
        return ("stream-" + offset).getBytes(StandardCharsets.UTF_8);
    }

    /** A consumer on its own channel with basicQos(PREFETCH) and x-stream-offset = `offset`. */
    static StreamConsumer consume(Connection connection, String queue, Object offset,
                                  Long expectedStart, long expectedCount) throws IOException {
        Channel channel = connection.createChannel();
        channel.basicQos(PREFETCH);
        StreamConsumer consumer = new StreamConsumer(channel, expectedStart, expectedCount);
        Map<String, Object> consumeArgs = Collections.singletonMap("x-stream-offset", offset);
        consumer.consumerTag = channel.basicConsume(queue, false, consumeArgs, consumer);
        return consumer;
    }

    /**
     * Checks each delivery: header x-stream-offset is a Long, consecutive from the first
     * one (which must be `expectedStart` when given), body "stream-OFFSET". Acks each one.
     */
    static class StreamConsumer extends DefaultConsumer {
        final Long expectedStart;
        final long expectedCount;
        final CountDownLatch done = new CountDownLatch(1);
        volatile String consumerTag;
        long received;
        long firstOffset = -1;
        long lastOffset = -1;
        boolean inOrder = true;
        boolean bodiesMatch = true;
        long redelivered;
        String headerType = "none";
        String error;
        long waitTarget = -1;   // awaitOffset: the offset that ends the wait

        StreamConsumer(Channel channel, Long expectedStart, long expectedCount) {
            super(channel);
            this.expectedStart = expectedStart;
            this.expectedCount = expectedCount;
        }

        @Override
        public void handleDelivery(String tag, Envelope envelope, AMQP.BasicProperties props,
                                   byte[] bodyBytes) {
            try {
                synchronized (this) {
                    Map<String, Object> headers = props.getHeaders();
                    Object value = headers == null ? null : headers.get("x-stream-offset");
                    long offset;
                    if (value instanceof Long) {
                        offset = (Long) value;
                        if (received == 0) {
                            headerType = "Long";
                        }
                    } else {
                        headerType = value == null ? "missing" : value.getClass().getSimpleName();
                        fail("delivery " + received + ": x-stream-offset header is " + headerType);
                        offset = -1;
                    }
                    if (received == 0) {
                        firstOffset = offset;
                        if (expectedStart != null && offset != expectedStart) {
                            inOrder = false;
                        }
                    } else if (offset != lastOffset + 1) {
                        inOrder = false;
                        fail("offset " + offset + " after " + lastOffset);
                    }
                    if (!new String(bodyBytes, StandardCharsets.UTF_8).equals("stream-" + offset)) {
                        bodiesMatch = false;
                        fail("offset " + offset + ": body "
                                + new String(bodyBytes, StandardCharsets.UTF_8));
                    }
                    if (envelope.isRedeliver()) {
                        redelivered++;
                    }
                    lastOffset = offset;
                    received++;
                    if ((expectedCount >= 0 && received >= expectedCount)
                            || (waitTarget >= 0 && offset >= waitTarget)) {
                        done.countDown();
                    }
                }
                getChannel().basicAck(envelope.getDeliveryTag(), false);
            } catch (Throwable e) {
                synchronized (this) {
                    fail("handleDelivery: " + e);
                }
                done.countDown();
            }
        }

        private void fail(String message) {
            if (error == null) {
                error = message;
            }
        }

        void await() throws InterruptedException {
            if (!done.await(WAIT_SECONDS, TimeUnit.SECONDS)) {
                synchronized (this) {
                    throw new AssertionError("consumer " + consumerTag + " timed out after "
                            + WAIT_SECONDS + " s: received " + received + " of " + expectedCount
                            + " (first offset " + firstOffset + ", last " + lastOffset + ")");
                }
            }
        }

        void awaitOffset(long target) throws InterruptedException {
            synchronized (this) {
                waitTarget = target;
                if (lastOffset >= target) {
                    done.countDown();
                }
            }
            if (!done.await(WAIT_SECONDS, TimeUnit.SECONDS)) {
                synchronized (this) {
                    throw new AssertionError("consumer " + consumerTag + " timed out after "
                            + WAIT_SECONDS + " s waiting for offset " + target + ": received "
                            + received + " (first offset " + firstOffset + ", last "
                            + lastOffset + ")");
                }
            }
        }

        /** Let stray deliveries arrive, cancel and close the channel; fail on a bad delivery. */
        void finish() throws Exception {
            Thread.sleep(200);
            getChannel().basicCancel(consumerTag);
            getChannel().close();
            synchronized (this) {
                Interop.check(error == null, "consumer " + consumerTag + ": " + error);
            }
        }

        synchronized void report(String name) {
            Interop.result(name + "_count", received);
            Interop.result(name + "_first_offset", firstOffset);
            Interop.result(name + "_last_offset", lastOffset);
            Interop.result(name + "_in_order", inOrder);
            Interop.result(name + "_bodies_match", bodiesMatch);
            Interop.result(name + "_header_type", headerType);
            Interop.result(name + "_redelivered", redelivered);
        }
    }

    static void reportShutdown(String name, ShutdownSignalException signal) {
        Interop.result(name + "_hard", signal.isHardError());
        Object reason = signal.getReason();
        if (reason instanceof AMQP.Connection.Close) {
            AMQP.Connection.Close close = (AMQP.Connection.Close) reason;
            Interop.result(name + "_reply_code", close.getReplyCode());
            Interop.result(name + "_reply_text", close.getReplyText());
            Interop.result(name + "_method", close.getClassId() + "." + close.getMethodId());
        } else if (reason instanceof AMQP.Channel.Close) {
            AMQP.Channel.Close close = (AMQP.Channel.Close) reason;
            Interop.result(name + "_reply_code", close.getReplyCode());
            Interop.result(name + "_reply_text", close.getReplyText());
            Interop.result(name + "_method", close.getClassId() + "." + close.getMethodId());
        } else {
            Interop.result(name + "_reason", reason);
        }
    }

    /** Best effort, on a connection of its own (the program may have failed anywhere). */
    static void deleteQuietly(String host, int port, String queue) {
        try (Connection connection = Interop.factory(host, port).newConnection()) {
            connection.createChannel().queueDelete(queue);
        } catch (Exception ignored) {
            // nothing more to do: the queue is gone or the broker is unreachable
        }
    }
}
