import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultSaslConfig;
import com.rabbitmq.client.GetResponse;

import java.io.FileInputStream;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import java.util.Random;

import javax.net.ssl.KeyManager;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * The Java client over TLS (arguments: HOST TLS_PORT PKI_DIR, the certificates of
 * tests/support/tls_support.py). PLAIN login trusting the test CA: 200 confirmed
 * messages, one of 1 MiB, come back intact; the same over a TLS 1.2 context; EXTERNAL
 * with guest's certificate logs in as guest (user_id accepted); EXTERNAL without a
 * certificate is refused, and the exception is reported.
 */
public class TlsClient {
    private static final char[] P12_PASSWORD = "changeit".toCharArray();

    public static void main(String[] args) {
        Interop.main("TlsClient", args, (host, port) -> {
            String pki = args[2];
            ConnectionFactory plain = Interop.factory(host, port);
            plain.useSslProtocol(context("TLS", pki, false));
            try (Connection connection = plain.newConnection()) {
                Interop.result("plain_round_trip", roundTrip(connection, null));
            }
            ConnectionFactory tls12 = Interop.factory(host, port);
            tls12.useSslProtocol(context("TLSv1.2", pki, false));
            try (Connection connection = tls12.newConnection()) {
                Interop.result("tls12_round_trip", roundTrip(connection, null));
            }
            ConnectionFactory external = Interop.factory(host, port);
            external.setSaslConfig(DefaultSaslConfig.EXTERNAL);
            external.useSslProtocol(context("TLS", pki, true));
            try (Connection connection = external.newConnection()) {
                Interop.result("external_round_trip", roundTrip(connection, "guest"));
            }
            ConnectionFactory anonymous = Interop.factory(host, port);
            anonymous.setSaslConfig(DefaultSaslConfig.EXTERNAL);
            anonymous.useSslProtocol(context("TLS", pki, false));
            try (Connection connection = anonymous.newConnection()) {
                Interop.result("external_without_certificate", "accepted");
            } catch (Exception refused) {
                Interop.result("external_without_certificate", refused.getClass().getSimpleName());
                Interop.result("external_without_certificate_text", refused.getMessage());
            }
        });
    }

    /** Publish 200 messages with confirms (one of 1 MiB, the rest small) and get them
     *  back: "ok", or what differed. */
    private static String roundTrip(Connection connection, String userId) throws Exception {
        Channel channel = connection.createChannel();
        String queue = channel.queueDeclare("", false, true, true, null).getQueue();
        channel.confirmSelect();
        byte[] large = new byte[1024 * 1024];
        new Random(14).nextBytes(large);
        AMQP.BasicProperties properties = new AMQP.BasicProperties.Builder().userId(userId).build();
        for (int i = 0; i < 200; i++) {
            byte[] body = i == 100 ? large : ("m" + i).getBytes(StandardCharsets.UTF_8);
            channel.basicPublish("", queue, properties, body);
        }
        channel.waitForConfirmsOrDie(20_000);
        for (int i = 0; i < 200; i++) {
            GetResponse response = channel.basicGet(queue, true);
            if (response == null) {
                return "missing message " + i;
            }
            byte[] expected = i == 100 ? large : ("m" + i).getBytes(StandardCharsets.UTF_8);
            if (!Interop.sha256(response.getBody()).equals(Interop.sha256(expected))) {
                return "message " + i + " differs";
            }
        }
        channel.close();
        return "ok";
    }

    /** A client context trusting the test CA, presenting guest's certificate if asked. */
    private static SSLContext context(String protocol, String pki, boolean withCertificate)
            throws Exception {
        KeyStore trusted = KeyStore.getInstance("PKCS12");
        trusted.load(null, null);
        try (InputStream in = new FileInputStream(pki + "/ca.pem")) {
            trusted.setCertificateEntry("ca",
                    CertificateFactory.getInstance("X.509").generateCertificate(in));
        }
        TrustManagerFactory trust =
                TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        trust.init(trusted);
        KeyManager[] keys = null;
        if (withCertificate) {
            KeyStore own = KeyStore.getInstance("PKCS12");
            try (InputStream in = new FileInputStream(pki + "/guest.p12")) {
                own.load(in, P12_PASSWORD);
            }
            KeyManagerFactory factory =
                    KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            factory.init(own, P12_PASSWORD);
            keys = factory.getKeyManagers();
        }
        SSLContext context = SSLContext.getInstance(protocol);
        context.init(keys, trust.getTrustManagers(), null);
        return context;
    }
}
