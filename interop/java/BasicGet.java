import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.GetResponse;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * basicGet on a queue of 5 messages: each GetResponse reports the messages left behind
 * it (4, 3, 2, 1, 0), in publish order; then basicGet returns null (Basic.GetEmpty).
 */
public class BasicGet {
    public static void main(String[] args) {
        Interop.main("BasicGet", args, (host, port) -> {
            try (Connection connection = Interop.factory(host, port).newConnection()) {
                Channel channel = connection.createChannel();
                String queue = Interop.unique("java-get");
                channel.queueDeclare(queue, false, true, false, null);
                channel.confirmSelect();
                for (int i = 0; i < 5; i++) {
                    channel.basicPublish("", queue, null, ("m" + i).getBytes(StandardCharsets.UTF_8));
                }
                channel.waitForConfirmsOrDie(5_000);
                List<String> counts = new ArrayList<>();
                List<String> bodies = new ArrayList<>();
                GetResponse response;
                while ((response = channel.basicGet(queue, true)) != null && counts.size() < 10) {
                    counts.add(Integer.toString(response.getMessageCount()));
                    bodies.add(new String(response.getBody(), StandardCharsets.UTF_8));
                }
                Interop.result("message_counts", String.join(",", counts));
                Interop.result("bodies", String.join(",", bodies));
                Interop.result("empty_response", channel.basicGet(queue, true));
                channel.queueDelete(queue);
            }
        });
    }
}
