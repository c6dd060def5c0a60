import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.Recoverable;
import com.rabbitmq.client.RecoveryListener;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * Automatic connection and topology recovery across a broker restart.
 * Declares a non-durable exchange, queue and binding, consumes, and checks messages flow;
 * prints READY and waits for the line RESTARTED on stdin (the test restarts the broker on
 * the same port in between); waits for the client to finish recovery (connection,
 * channel, exchange, queue, binding, consumer), then publishes again and checks every
 * message published after recovery is consumed.
 */
public class Recovery {
    static final int MESSAGES = 20;

    public static void main(String[] args) {
        Interop.main("Recovery", args, (host, port) -> {
            ConnectionFactory factory = Interop.factory(host, port);
            factory.setAutomaticRecoveryEnabled(true);
            factory.setTopologyRecoveryEnabled(true);
            factory.setNetworkRecoveryInterval(500);
            CountDownLatch recovered = new CountDownLatch(1);
            CountDownLatch recoveryStarted = new CountDownLatch(1);
            try (Connection connection = factory.newConnection()) {
                ((Recoverable) connection).addRecoveryListener(new RecoveryListener() {
                    public void handleRecovery(Recoverable recoverable) {
                        recovered.countDown();
                    }

                    public void handleRecoveryStarted(Recoverable recoverable) {
                        recoveryStarted.countDown();
                    }
                });
                Channel channel = connection.createChannel();
                String exchange = Interop.unique("java-recovery-x");
                String queue = Interop.unique("java-recovery-q");
                channel.exchangeDeclare(exchange, "direct", false, false, null);
                channel.queueDeclare(queue, false, false, false, null);
                channel.queueBind(queue, exchange, "key");
                BlockingQueue<String> received = new LinkedBlockingQueue<>();
                channel.basicConsume(queue, true, new DefaultConsumer(channel) {
                    @Override
                    public void handleDelivery(String tag, Envelope envelope,
                                               AMQP.BasicProperties props, byte[] body) {
                        received.add(new String(body, StandardCharsets.UTF_8));
                    }
                });

                Interop.result("before_received", roundTrip(channel, exchange, received, "before"));
                System.out.println("READY");
                System.out.flush();

                String line = readLine(30);
                Interop.check("RESTARTED".equals(line), "expected RESTARTED on stdin, got " + line);
                Interop.result("recovery_started", recoveryStarted.await(30, TimeUnit.SECONDS));
                Interop.result("recovered", recovered.await(30, TimeUnit.SECONDS));
                Interop.result("connection_open", connection.isOpen());
                Interop.result("after_received", roundTrip(channel, exchange, received, "after"));
                Interop.result("stray_messages", received.size());

                channel.queueDelete(queue);
                channel.exchangeDelete(exchange);
            }
        });
    }

    /** Publish MESSAGES messages through the exchange; return how many came back in order. */
    static int roundTrip(Channel channel, String exchange, BlockingQueue<String> received, String label)
            throws Exception {
        for (int i = 0; i < MESSAGES; i++) {
            channel.basicPublish(exchange, "key", null, (label + "-" + i).getBytes(StandardCharsets.UTF_8));
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        int matched = 0;
        while (matched < MESSAGES) {
            String body = received.poll(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            if (body == null) {
                break;
            }
            String expected = label + "-" + matched;
            Interop.check(body.equals(expected), "expected " + expected + ", got " + body);
            matched++;
        }
        return matched;
    }

    /** One line from stdin, or null after `seconds`. */
    static String readLine(int seconds) throws InterruptedException {
        BlockingQueue<String> lines = new LinkedBlockingQueue<>();
        Thread reader = new Thread(() -> {
            try {
                BufferedReader stdin = new BufferedReader(
                        new InputStreamReader(System.in, StandardCharsets.UTF_8));
                String line = stdin.readLine();
                lines.add(line == null ? "<EOF>" : line.trim());
            } catch (Exception error) {
                lines.add("<" + error + ">");
            }
        });
        reader.setDaemon(true);
        reader.start();
        return lines.poll(seconds, TimeUnit.SECONDS);
    }
}
