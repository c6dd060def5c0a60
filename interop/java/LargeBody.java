import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.GetResponse;

import java.util.Random;

/**
 * A 5 MiB body over a connection negotiated down to frame_max 8192: the client splits it
 * into ~640 body frames and the broker must reassemble and re-split it byte for byte.
 */
public class LargeBody {
    static final int SIZE = 5 * 1024 * 1024;

    public static void main(String[] args) {
        Interop.main("LargeBody", args, (host, port) -> {
            ConnectionFactory factory = Interop.factory(host, port);
            factory.setRequestedFrameMax(8192);
            try (Connection connection = factory.newConnection()) {
                Interop.result("frame_max", connection.getFrameMax());
                Channel channel = connection.createChannel();
                String queue = Interop.unique("java-large");
                channel.queueDeclare(queue, false, true, false, null);
                byte[] body = new byte[SIZE];
                new Random(20240501L).nextBytes(body);
                channel.confirmSelect();
                channel.basicPublish("", queue, null, body);
                channel.waitForConfirmsOrDie(30_000);
                GetResponse got = channel.basicGet(queue, true);
                Interop.result("sent_sha256", Interop.sha256(body));
                Interop.result("received_length", got == null ? -1 : got.getBody().length);
                Interop.result("received_sha256", got == null ? null : Interop.sha256(got.getBody()));
                channel.queueDelete(queue);
            }
        });
    }
}
