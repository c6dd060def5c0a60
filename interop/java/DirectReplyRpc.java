import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.RpcClient;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * RpcClient with its default reply-to, amq.rabbitmq.reply-to (direct reply-to): a
 * server consumer answers three calls through the default exchange; each call gets its
 * own answer and the server saw the broker-rewritten reply_to.
 */
public class DirectReplyRpc {
    public static void main(String[] args) {
        Interop.main("DirectReplyRpc", args, (host, port) -> {
            try (Connection connection = Interop.factory(host, port).newConnection()) {
                Channel serverChannel = connection.createChannel();
                String queue = Interop.unique("java-rpc");
                serverChannel.queueDeclare(queue, false, true, true, null);
                List<String> replyTos = new ArrayList<>();
                serverChannel.basicConsume(queue, true, new DefaultConsumer(serverChannel) {
                    @Override
                    public void handleDelivery(String tag, Envelope envelope,
                                               AMQP.BasicProperties properties, byte[] body)
                            throws java.io.IOException {
                        replyTos.add(properties.getReplyTo());
                        AMQP.BasicProperties reply = new AMQP.BasicProperties.Builder()
                                .correlationId(properties.getCorrelationId()).build();
                        String answer = new String(body, StandardCharsets.UTF_8).toUpperCase();
                        getChannel().basicPublish("", properties.getReplyTo(), reply,
                                answer.getBytes(StandardCharsets.UTF_8));
                    }
                });
                RpcClient client = new RpcClient(connection.createChannel(), "", queue, 10_000);
                List<String> answers = new ArrayList<>();
                for (String request : new String[] {"one", "two", "three"}) {
                    answers.add(client.stringCall(request));
                }
                client.close();
                Interop.result("answers", String.join(",", answers));
                Interop.result("reply_to_rewritten", replyTos.stream().allMatch(
                        replyTo -> replyTo.startsWith("amq.rabbitmq.reply-to.")));
            }
        });
    }
}
