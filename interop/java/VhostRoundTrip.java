import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.GetResponse;

import java.nio.charset.StandardCharsets;

/**
 * A program under test, as a test suite outside Java would run it: connect to
 * HOST PORT VHOST USER PASSWORD, publish COUNT messages to QUEUE with publisher confirms,
 * consume and ack them all, then publish one "summary" message (published, confirmed,
 * consumed counts) to QUEUE.results for the test to read. Prints `RESULT key=value`
 * lines; exits 1 on any failure.
 */
public class VhostRoundTrip {
    public static void main(String[] args) throws Exception {
        if (args.length != 7) {
            System.err.println("usage: java VhostRoundTrip HOST PORT VHOST USER PASSWORD QUEUE COUNT");
            System.exit(2);
        }
        ConnectionFactory factory = new ConnectionFactory();
        factory.setHost(args[0]);
        factory.setPort(Integer.parseInt(args[1]));
        factory.setVirtualHost(args[2]);
        factory.setUsername(args[3]);
        factory.setPassword(args[4]);
        factory.setConnectionTimeout(5000);
        factory.setAutomaticRecoveryEnabled(false);
        String queue = args[5];
        int count = Integer.parseInt(args[6]);
        try (Connection connection = factory.newConnection("vhost-round-trip")) {
            Channel channel = connection.createChannel();
            channel.queueDeclare(queue, false, false, false, null);
            channel.queueDeclare(queue + ".results", false, false, false, null);
            channel.confirmSelect();
            for (int i = 0; i < count; i++) {
                channel.basicPublish("", queue, null, ("m" + i).getBytes(StandardCharsets.UTF_8));
            }
            channel.waitForConfirmsOrDie(10000);
            int consumed = 0;
            for (GetResponse got; (got = channel.basicGet(queue, false)) != null; consumed++) {
                channel.basicAck(got.getEnvelope().getDeliveryTag(), false);
            }
            String summary = "published=" + count + " confirmed=" + count + " consumed=" + consumed;
            channel.basicPublish("", queue + ".results", null, summary.getBytes(StandardCharsets.UTF_8));
            channel.waitForConfirmsOrDie(10000);
            System.out.println("RESULT summary=" + summary);
        } catch (Exception error) {
            System.out.println("FAIL VhostRoundTrip: " + error);
            System.exit(1);
        }
    }
}
