import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.GetResponse;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicReference;

/**
 * Heartbeats: negotiate a 1 s heartbeat, stay idle for IDLE_MS (well past the client's
 * missed-heartbeat limit, so only the broker's heartbeats keep the client from closing
 * the connection), then publish and get on the same channel.
 */
public class Heartbeat {
    static final long IDLE_MS = 3_500;

    public static void main(String[] args) {
        Interop.main("Heartbeat", args, (host, port) -> {
            ConnectionFactory factory = Interop.factory(host, port);
            factory.setRequestedHeartbeat(1);
            try (Connection connection = factory.newConnection()) {
                AtomicReference<String> shutdown = new AtomicReference<>("none");
                connection.addShutdownListener(cause -> shutdown.set(String.valueOf(cause)));
                Interop.result("heartbeat", connection.getHeartbeat());
                Channel channel = connection.createChannel();
                String queue = Interop.unique("java-heartbeat");
                channel.queueDeclare(queue, false, true, false, null);

                Thread.sleep(IDLE_MS);   // the scenario: an idle connection

                Interop.result("open_after_idle", connection.isOpen());
                Interop.result("shutdown_during_idle", shutdown.get());
                channel.basicPublish("", queue, null, "still-alive".getBytes(StandardCharsets.UTF_8));
                GetResponse got = channel.basicGet(queue, true);
                String text = got == null ? null : new String(got.getBody(), StandardCharsets.UTF_8);
                Interop.result("get_body", text);
                Interop.result("open_at_end", connection.isOpen());
                channel.queueDelete(queue);
            }
        });
    }
}
