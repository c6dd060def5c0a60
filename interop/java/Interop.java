import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.ShutdownSignalException;

import java.security.MessageDigest;
import java.util.UUID;

/**
 * Shared plumbing for the interop programs: argument parsing, the connection factory,
 * result lines and checks. A program prints `RESULT key=value` lines for the pytest
 * side, `FAIL reason` and exit status 1 when a check fails, exit status 0 otherwise.
 */
final class Interop {
    interface Body {
        void run(String host, int port) throws Exception;
    }

    private Interop() {
    }

    /** Run `body` with host and port from args[0], args[1]; exit 0, or 1 on any failure. */
    static void main(String name, String[] args, Body body) {
        if (args.length < 2) {
            System.err.println("usage: java " + name + " HOST PORT");
            System.exit(2);
        }
        int status = 0;
        try {
            body.run(args[0], Integer.parseInt(args[1]));
            System.out.println("DONE " + name);
        } catch (Throwable error) {
            System.out.println("FAIL " + name + ": " + error);
            error.printStackTrace();
            status = 1;
        }
        System.out.flush();
        // Exit explicitly: a failed scenario may leave client threads running.
        System.exit(status);
    }

    /** A connection factory for the broker at host:port, user guest/guest, vhost "/". */
    static ConnectionFactory factory(String host, int port) {
        ConnectionFactory factory = new ConnectionFactory();
        factory.setHost(host);
        factory.setPort(port);
        factory.setUsername("guest");
        factory.setPassword("guest");
        factory.setVirtualHost("/");
        factory.setConnectionTimeout(5000);
        factory.setHandshakeTimeout(5000);
        factory.setChannelRpcTimeout(10000);
        factory.setAutomaticRecoveryEnabled(false);
        return factory;
    }

    /** A queue or exchange name no other test uses. */
    static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID().toString().replace("-", "");
    }

    static void result(String key, Object value) {
        System.out.println("RESULT " + key + "=" + value);
    }

    static void check(boolean condition, String message) {
        if (!condition) {
            throw new AssertionError(message);
        }
    }

    interface Call {
        void run() throws java.io.IOException;
    }

    /** The ShutdownSignalException a synchronous call fails with (the broker closed the
     *  channel or the connection); AssertionError when it succeeds. */
    static ShutdownSignalException expectShutdown(Call call) {
        try {
            call.run();
        } catch (java.io.IOException error) {
            if (error.getCause() instanceof ShutdownSignalException) {
                return (ShutdownSignalException) error.getCause();
            }
            throw new AssertionError("unexpected IOException", error);
        } catch (ShutdownSignalException signal) {
            return signal;
        }
        throw new AssertionError("the call succeeded; expected the broker to close the channel");
    }

    static String sha256(byte[] data) throws Exception {
        StringBuilder hex = new StringBuilder();
        for (byte b : MessageDigest.getInstance("SHA-256").digest(data)) {
            hex.append(String.format("%02x", b));
        }
        return hex.toString();
    }
}
