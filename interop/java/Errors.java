import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ShutdownSignalException;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * Channel errors as the Java client reports them: a ShutdownSignalException carrying the
 * broker's Channel.Close (reply code, text, failing class and method id). Each case gets
 * its own channel; the connection must stay open throughout. Result lines per case:
 * CASE_code, CASE_text, CASE_method ("class.method" ids), CASE_hard, CASE_by_application,
 * and CASE_name for the queue or exchange name used.
 */
public class Errors {
    public static void main(String[] args) {
        Interop.main("Errors", args, (host, port) -> {
            try (Connection connection = Interop.factory(host, port).newConnection()) {
                // Synchronous method: the error is thrown as IOException(ShutdownSignalException).
                Channel passive = connection.createChannel();
                String missing = Interop.unique("java-missing");
                Interop.result("passive_missing_name", missing);
                report("passive_missing", Interop.expectShutdown(() -> passive.queueDeclarePassive(missing)));

                Channel reserved = connection.createChannel();
                String amqName = Interop.unique("amq.x");
                Interop.result("reserved_exchange_name", amqName);
                report("reserved_exchange", Interop.expectShutdown(() -> reserved.exchangeDeclare(amqName, "direct")));

                // basic.ack has no reply: wait for the channel to be closed by the broker.
                Channel acker = connection.createChannel();
                CompletableFuture<ShutdownSignalException> closed = new CompletableFuture<>();
                acker.addShutdownListener(closed::complete);
                acker.basicAck(12345, false);
                report("unknown_tag", closed.get(5, TimeUnit.SECONDS));

                Interop.result("connection_open", connection.isOpen());
                Channel after = connection.createChannel();
                Interop.result("new_channel_works", after.queueDeclare().getQueue().length() > 0);
            }
        });
    }

    static void report(String name, ShutdownSignalException signal) {
        Interop.result(name + "_hard", signal.isHardError());
        Interop.result(name + "_by_application", signal.isInitiatedByApplication());
        if (signal.getReason() instanceof AMQP.Channel.Close) {
            AMQP.Channel.Close close = (AMQP.Channel.Close) signal.getReason();
            Interop.result(name + "_code", close.getReplyCode());
            Interop.result(name + "_text", close.getReplyText());
            Interop.result(name + "_method", close.getClassId() + "." + close.getMethodId());
        } else {
            Interop.result(name + "_reason", signal.getReason());
        }
    }
}
