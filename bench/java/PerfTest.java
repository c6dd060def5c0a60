/*
 * PerfTest: a broker-agnostic AMQP 0-9-1 load generator on the RabbitMQ Java client, in the
 * spirit of RabbitMQ's PerfTest. bench/compare.py compiles and runs it against Warren and
 * RabbitMQ; it also runs alone:
 *
 *   javac -cp /usr/share/java/amqp-client.jar -d /tmp/pt bench/java/PerfTest.java
 *   java -cp /tmp/pt:/usr/share/java/amqp-client.jar:/usr/share/java/slf4j-api.jar:\
 *        /usr/share/java/slf4j-nop.jar PerfTest --port 5672 --autoack --duration 10
 *
 * Modes:
 *   (default)              producers publish to a fresh queue, consumers basic.consume it
 *   --get                  consumers poll with basic.get in a loop instead of basic.consume
 *   --idle-connections N   open N connections, print a "ready" JSON line, hold them until a
 *                          line (or EOF) arrives on stdin or --hold seconds pass, then close
 *
 * Every producer and consumer is a thread with its own connection. The first 8 bytes of each
 * body are System.nanoTime() at publish time (one JVM, so it is comparable across threads);
 * consumers record end-to-end latency from it. Rates and latencies count only events inside the
 * steady window [start + warm-up, start + duration). The final line on stdout is one JSON
 * object; progress and a human summary go to stderr. Exit status: 0 clean, 1 errors during
 * the run (figures still printed), 2 bad arguments or setup failure, 3 watchdog.
 */

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.BlockedListener;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.ConfirmListener;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.GetResponse;
import com.rabbitmq.client.MessageProperties;

import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.net.InetAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ConcurrentNavigableMap;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.locks.LockSupport;

import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

public final class PerfTest {

    // ------------------------------------------------------------------ configuration

    static final class Config {
        String host = "127.0.0.1";
        int port = 5672;
        String user = "guest";
        String password = "guest";
        String vhost = "/";
        int producers = 1;
        int consumers = 1;
        int size = 16;
        double duration = 10.0;
        double warmup = -1;          // < 0: 10 % of the duration
        boolean persistent = false;
        int confirm = 0;             // window of unconfirmed publishes per producer; 0 = off
        int prefetch = 0;            // 0 = no basic.qos
        boolean autoack = false;
        int multiAckEvery = 0;       // 0 = ack each delivery
        double rate = 0;             // total msg/s over all producers; 0 = unpaced
        boolean get = false;
        String queue = null;
        int prefill = 0;             // messages published (and confirmed) before the start
        int idleConnections = 0;
        double hold = 120.0;
        double setupTimeout = 30.0;
        String tlsCa = null;         // connect over TLS, trusting this CA (PEM)
    }

    static void usage(String error) {
        if (error != null) {
            System.err.println("PerfTest: " + error);
        }
        System.err.println(String.join("\n",
            "usage: PerfTest [options]",
            "  --host H (127.0.0.1, loopback only)  --port P (5672)",
            "  --tls-ca FILE           connect over TLS (amqps port), trusting the CA in FILE",
            "  --user U --password P --vhost V     (guest/guest//)",
            "  --producers N (1)  --consumers M (1, 0 = publish only)",
            "  --size BYTES (16, >= 8)  --duration S (10)  --warmup S (10% of duration)",
            "  --persistent            durable queue, delivery_mode 2",
            "  --confirm N             publisher confirms, at most N unconfirmed per producer",
            "                          (0 = no confirms)",
            "  --prefetch N            basic.qos per consumer channel (0 = none)",
            "  --autoack | --multi-ack-every K   (default: manual ack of each delivery)",
            "  --rate R                fixed total publish rate in msg/s (0 = unpaced)",
            "  --get                   consumers poll with basic.get instead of basic.consume",
            "  --prefill N             publish N messages (confirmed) before the start",
            "  --queue NAME            default perftest-<uuid>; declared, deleted at the end",
            "  --idle-connections N    open N idle connections, hold them (--hold S, 120) until",
            "                          a line arrives on stdin, then close them"));
        System.exit(2);
    }

    static Config parse(String[] args) {
        Config c = new Config();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (a.equals("-h") || a.equals("--help")) {
                usage(null);
            }
            boolean flag = a.equals("--persistent") || a.equals("--autoack") || a.equals("--get");
            if (flag) {
                switch (a) {
                    case "--persistent": c.persistent = true; break;
                    case "--autoack": c.autoack = true; break;
                    default: c.get = true; break;
                }
                continue;
            }
            if (i + 1 >= args.length) {
                usage("missing value for " + a);
            }
            String v = args[++i];
            try {
                switch (a) {
                    case "--host": c.host = v; break;
                    case "--port": c.port = Integer.parseInt(v); break;
                    case "--user": c.user = v; break;
                    case "--password": c.password = v; break;
                    case "--vhost": c.vhost = v; break;
                    case "--producers": c.producers = Integer.parseInt(v); break;
                    case "--consumers": c.consumers = Integer.parseInt(v); break;
                    case "--size": c.size = Integer.parseInt(v); break;
                    case "--duration": c.duration = Double.parseDouble(v); break;
                    case "--warmup": c.warmup = Double.parseDouble(v); break;
                    case "--confirm": c.confirm = Integer.parseInt(v); break;
                    case "--prefetch": c.prefetch = Integer.parseInt(v); break;
                    case "--multi-ack-every": c.multiAckEvery = Integer.parseInt(v); break;
                    case "--rate": c.rate = Double.parseDouble(v); break;
                    case "--queue": c.queue = v; break;
                    case "--prefill": c.prefill = Integer.parseInt(v); break;
                    case "--idle-connections": c.idleConnections = Integer.parseInt(v); break;
                    case "--hold": c.hold = Double.parseDouble(v); break;
                    case "--setup-timeout": c.setupTimeout = Double.parseDouble(v); break;
                    case "--tls-ca": c.tlsCa = v; break;
                    default: usage("unknown option " + a);
                }
            } catch (NumberFormatException e) {
                usage("bad number for " + a + ": " + v);
            }
        }
        if (c.warmup < 0) {
            c.warmup = c.duration * 0.1;
        }
        if (c.idleConnections < 0) usage("--idle-connections must be >= 0");
        if (c.idleConnections == 0) {
            if (c.producers < 0 || c.consumers < 0) usage("--producers/--consumers must be >= 0");
            if (c.producers + c.consumers == 0) usage("need at least one producer or consumer");
            if (c.prefill < 0) usage("--prefill must be >= 0");
            if (c.size < 8) usage("--size must be >= 8 (the body starts with a timestamp)");
            if (c.duration <= 0 || c.warmup >= c.duration) usage("need 0 <= --warmup < --duration");
            if (c.confirm < 0 || c.prefetch < 0 || c.multiAckEvery < 0 || c.rate < 0) {
                usage("negative values are not allowed");
            }
            if (c.autoack && c.multiAckEvery > 0) {
                usage("--autoack and --multi-ack-every exclude each other");
            }
            if (c.prefetch > 0 && c.multiAckEvery > c.prefetch) {
                usage("--multi-ack-every must be <= --prefetch (or the consumer stalls)");
            }
            if (c.prefetch > 65535) usage("--prefetch must be <= 65535");
        }
        return c;
    }

    // ------------------------------------------------------------------ latency histogram

    /** Log-linear histogram of nanosecond values: exact below 1024, ~0.2 % buckets above. */
    static final class Histogram {
        final long[] counts = new long[1024 + 54 * 512];
        long total;
        long max;
        double sum;

        static int index(long v) {
            if (v < 1024) return (int) v;
            int e = 63 - Long.numberOfLeadingZeros(v);        // >= 10
            int shift = e - 9;
            int sub = (int) (v >>> shift);                     // in [512, 1024)
            return 1024 + (e - 10) * 512 + (sub - 512);
        }

        static long value(int idx) {
            if (idx < 1024) return idx;
            int k = idx - 1024;
            int e = k / 512 + 10;
            int sub = k % 512 + 512;
            int shift = e - 9;
            return ((long) sub << shift) + ((1L << shift) >> 1);
        }

        synchronized void record(long v) {
            if (v < 0) v = 0;
            counts[index(v)]++;
            total++;
            sum += v;
            if (v > max) max = v;
        }

        synchronized void merge(Histogram o) {
            synchronized (o) {
                for (int i = 0; i < counts.length; i++) counts[i] += o.counts[i];
                total += o.total;
                sum += o.sum;
                max = Math.max(max, o.max);
            }
        }

        /** Nearest-rank percentile, in nanoseconds. */
        synchronized long percentile(double p) {
            if (total == 0) return -1;
            long rank = (long) Math.ceil(p / 100.0 * total);
            if (rank < 1) rank = 1;
            long seen = 0;
            for (int i = 0; i < counts.length; i++) {
                seen += counts[i];
                if (seen >= rank) return Math.min(value(i), max);
            }
            return max;
        }
    }

    // ------------------------------------------------------------------ shared run state

    final Config cfg;
    final ConnectionFactory factory;
    final String queue;
    final ConcurrentLinkedQueue<String> errors = new ConcurrentLinkedQueue<>();
    final List<Connection> connections = new ArrayList<>();
    final LongAdder publishedWindow = new LongAdder();
    final LongAdder publishedTotal = new LongAdder();
    final LongAdder confirmedWindow = new LongAdder();
    final LongAdder confirmedTotal = new LongAdder();
    final LongAdder nackedTotal = new LongAdder();
    final LongAdder consumedWindow = new LongAdder();
    final LongAdder consumedTotal = new LongAdder();
    final LongAdder emptyGets = new LongAdder();
    final LongAdder blockedEvents = new LongAdder();
    final List<Histogram> histograms = new ArrayList<>();
    final CountDownLatch ready;
    final CountDownLatch go = new CountDownLatch(1);
    volatile long t0;        // start of the run (nanoTime)
    volatile long warmEnd;   // end of the warm-up
    volatile long end;       // end of the run
    volatile boolean aborted;
    double prefillSeconds;

    PerfTest(Config cfg) throws Exception {
        this.cfg = cfg;
        this.queue = cfg.queue != null ? cfg.queue : "perftest-" + UUID.randomUUID();
        this.factory = new ConnectionFactory();
        factory.setHost(cfg.host);
        factory.setPort(cfg.port);
        factory.setUsername(cfg.user);
        factory.setPassword(cfg.password);
        factory.setVirtualHost(cfg.vhost);
        factory.setAutomaticRecoveryEnabled(false);
        factory.setConnectionTimeout(10_000);
        factory.setHandshakeTimeout(10_000);
        if (cfg.tlsCa != null) {
            factory.useSslProtocol(trusting(cfg.tlsCa));
        }
        this.ready = new CountDownLatch(cfg.producers + cfg.consumers);
    }

    /** A TLS context that trusts the CA certificate in `caFile` (PEM). */
    static SSLContext trusting(String caFile) throws Exception {
        KeyStore trusted = KeyStore.getInstance("PKCS12");
        trusted.load(null, null);
        try (InputStream in = new FileInputStream(caFile)) {
            trusted.setCertificateEntry("ca",
                    CertificateFactory.getInstance("X.509").generateCertificate(in));
        }
        TrustManagerFactory trust =
                TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        trust.init(trusted);
        SSLContext context = SSLContext.getInstance("TLS");
        context.init(null, trust.getTrustManagers(), null);
        return context;
    }

    Connection connect(String name) throws Exception {
        Connection c = factory.newConnection(name);
        synchronized (connections) {
            connections.add(c);
        }
        return c;
    }

    void error(String where, Throwable t) {
        if (!aborted) {
            errors.add(where + ": " + t);
        }
    }

    static void waitUntil(long deadline) {
        long now;
        while ((now = System.nanoTime()) < deadline) {
            LockSupport.parkNanos(Math.min(deadline - now, 50_000_000L));
        }
    }

    boolean inWindow(long t) {
        return t >= warmEnd && t < end;
    }

    // ------------------------------------------------------------------ producer

    void producer(int idx) {
        boolean counted = false;
        try {
            Connection conn = connect("perftest-producer-" + idx);
            conn.addBlockedListener(new BlockedListener() {
                public void handleBlocked(String reason) { blockedEvents.increment(); }
                public void handleUnblocked() { }
            });
            Channel ch = conn.createChannel();
            final Semaphore window = cfg.confirm > 0 ? new Semaphore(cfg.confirm) : null;
            final ConcurrentSkipListMap<Long, Boolean> outstanding = new ConcurrentSkipListMap<>();
            if (window != null) {
                ch.confirmSelect();
                ch.addConfirmListener(new ConfirmListener() {
                    int settle(long tag, boolean multiple) {
                        int n;
                        if (multiple) {
                            ConcurrentNavigableMap<Long, Boolean> head =
                                outstanding.headMap(tag, true);
                            n = head.size();
                            head.clear();
                        } else {
                            n = outstanding.remove(tag) != null ? 1 : 0;
                        }
                        window.release(n);
                        return n;
                    }

                    public void handleAck(long tag, boolean multiple) {
                        int n = settle(tag, multiple);
                        confirmedTotal.add(n);
                        if (inWindow(System.nanoTime())) confirmedWindow.add(n);
                    }

                    public void handleNack(long tag, boolean multiple) {
                        nackedTotal.add(settle(tag, multiple));
                    }
                });
            }
            AMQP.BasicProperties props = cfg.persistent
                ? MessageProperties.MINIMAL_PERSISTENT_BASIC : MessageProperties.MINIMAL_BASIC;
            byte[] body = new byte[cfg.size];
            ByteBuffer stamp = ByteBuffer.wrap(body);
            double perProducer = cfg.rate / Math.max(1, cfg.producers);
            double intervalNs = perProducer > 0 ? 1e9 / perProducer : 0;
            long offset = (long) (intervalNs * idx / cfg.producers);
            counted = true;
            ready.countDown();
            go.await();
            waitUntil(t0);
            long published = 0;
            long inWin = 0;
            outer:
            for (long i = 0; ; i++) {
                if (intervalNs > 0) {
                    long due = t0 + offset + (long) (i * intervalNs);
                    if (due >= end) break;
                    waitUntil(due);
                } else if (System.nanoTime() >= end) {
                    break;
                }
                if (window != null) {
                    while (!window.tryAcquire(50, TimeUnit.MILLISECONDS)) {
                        if (System.nanoTime() >= end) break outer;
                    }
                }
                long ts = System.nanoTime();
                if (ts >= end) break;
                stamp.putLong(0, ts);
                if (window != null) outstanding.put(ch.getNextPublishSeqNo(), Boolean.TRUE);
                ch.basicPublish("", queue, false, props, body);
                published++;
                if (ts >= warmEnd) inWin++;
            }
            publishedTotal.add(published);
            publishedWindow.add(inWin);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (Throwable t) {
            error("producer " + idx, t);
            if (!counted) ready.countDown();
        }
    }

    // ------------------------------------------------------------------ consumer

    final class Recorder {
        final Histogram hist = new Histogram();
        final Channel ch;
        int unacked;

        Recorder(Channel ch) {
            this.ch = ch;
            synchronized (histograms) {
                histograms.add(hist);
            }
        }

        void delivered(long tag, byte[] body) throws IOException {
            long now = System.nanoTime();
            consumedTotal.increment();
            if (inWindow(now) && body.length >= 8) {
                consumedWindow.increment();
                hist.record(now - ByteBuffer.wrap(body).getLong(0));
            }
            if (cfg.autoack) return;
            if (cfg.multiAckEvery > 0) {
                if (++unacked >= cfg.multiAckEvery) {
                    ch.basicAck(tag, true);
                    unacked = 0;
                }
            } else {
                ch.basicAck(tag, false);
            }
        }
    }

    void consumer(int idx) {
        boolean counted = false;
        try {
            Connection conn = connect("perftest-consumer-" + idx);
            Channel ch = conn.createChannel();
            if (cfg.prefetch > 0) ch.basicQos(cfg.prefetch);
            final Recorder rec = new Recorder(ch);
            if (!cfg.get) {
                ch.basicConsume(queue, cfg.autoack, "perftest-" + idx, new DefaultConsumer(ch) {
                    @Override
                    public void handleDelivery(String tag, Envelope env, AMQP.BasicProperties p,
                                               byte[] body) {
                        try {
                            rec.delivered(env.getDeliveryTag(), body);
                        } catch (Throwable t) {
                            error("consumer " + idx, t);
                        }
                    }
                });
                counted = true;
                ready.countDown();
                return;                        // deliveries arrive on the client's pool threads
            }
            counted = true;
            ready.countDown();
            go.await();
            waitUntil(t0);
            while (System.nanoTime() < end) {
                GetResponse r = ch.basicGet(queue, cfg.autoack);
                if (r == null) {
                    emptyGets.increment();
                    continue;
                }
                rec.delivered(r.getEnvelope().getDeliveryTag(), r.getBody());
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (Throwable t) {
            error("consumer " + idx, t);
            if (!counted) ready.countDown();
        }
    }

    // ------------------------------------------------------------------ run

    Map<String, Object> run() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        Connection admin;
        try {
            admin = factory.newConnection("perftest-admin");
        } catch (Exception e) {
            throw new SetupError("cannot connect to " + cfg.host + ":" + cfg.port + ": " + e);
        }
        Map<String, Object> props = admin.getServerProperties();
        out.put("server", serverInfo(props));
        Channel adminCh = admin.createChannel();
        adminCh.queueDeclare(queue, cfg.persistent, false, false, null);
        if (cfg.prefill > 0) {
            prefill(admin);
        }
        long backlog = -1;
        List<Thread> threads = new ArrayList<>();
        try {
            for (int i = 0; i < cfg.consumers; i++) {
                final int idx = i;
                threads.add(start("consumer-" + i, () -> consumer(idx)));
            }
            for (int i = 0; i < cfg.producers; i++) {
                final int idx = i;
                threads.add(start("producer-" + i, () -> producer(idx)));
            }
            if (!ready.await((long) (cfg.setupTimeout * 1000), TimeUnit.MILLISECONDS)) {
                errors.add("setup: workers not ready after " + cfg.setupTimeout + " s");
            }
            if (!errors.isEmpty()) {
                throw new SetupError("setup failed: " + String.join("; ", errors));
            }
            long start = System.nanoTime() + 200_000_000L;
            t0 = start;
            warmEnd = start + (long) (cfg.warmup * 1e9);
            end = start + (long) (cfg.duration * 1e9);
            go.countDown();
            waitUntil(end);
            for (Thread t : threads) {
                t.join(5_000);
                if (t.isAlive()) {
                    errors.add(t.getName() + ": still running 5 s after the end (blocked?)");
                }
            }
        } finally {
            aborted = true;
            go.countDown();
            List<Connection> all;
            synchronized (connections) {
                all = new ArrayList<>(connections);
            }
            for (Connection c : all) {
                try {
                    c.abort(3_000);
                } catch (Throwable ignored) {
                    // closing is best effort
                }
            }
            try {
                backlog = adminCh.queueDelete(queue).getMessageCount();
            } catch (Exception e) {
                errors.add("queue.delete: " + e);
            }
            try {
                admin.abort(3_000);
            } catch (Throwable ignored) {
                // best effort
            }
        }
        double window = cfg.duration - cfg.warmup;
        Histogram merged = new Histogram();
        synchronized (histograms) {
            for (Histogram h : histograms) merged.merge(h);
        }
        out.put("mode", cfg.get ? "get" : "consume");
        out.put("config", configMap());
        out.put("queue", queue);
        out.put("measured_seconds", window);
        out.put("published_per_s", publishedWindow.sum() / window);
        out.put("consumed_per_s", consumedWindow.sum() / window);
        out.put("confirmed_per_s", cfg.confirm > 0 ? confirmedWindow.sum() / window : null);
        out.put("published_total", publishedTotal.sum());
        out.put("consumed_total", consumedTotal.sum());
        out.put("confirmed_total", confirmedTotal.sum());
        out.put("nacked_total", nackedTotal.sum());
        out.put("empty_gets", emptyGets.sum());
        out.put("blocked_events", blockedEvents.sum());
        out.put("backlog_at_end", backlog);
        out.put("prefill_seconds", cfg.prefill > 0 ? prefillSeconds : null);
        Map<String, Object> lat = new LinkedHashMap<>();
        lat.put("samples", merged.total);
        lat.put("p50", ms(merged.percentile(50)));
        lat.put("p95", ms(merged.percentile(95)));
        lat.put("p99", ms(merged.percentile(99)));
        lat.put("max", merged.total > 0 ? merged.max / 1e6 : null);
        lat.put("mean", merged.total > 0 ? merged.sum / merged.total / 1e6 : null);
        out.put("latency_ms", lat);
        return out;
    }

    /** Publishes --prefill messages on a channel of `conn` and waits for their confirms. */
    void prefill(Connection conn) throws Exception {
        long t = System.nanoTime();
        Channel ch = conn.createChannel();
        ch.confirmSelect();
        AMQP.BasicProperties props = cfg.persistent
            ? MessageProperties.MINIMAL_PERSISTENT_BASIC : MessageProperties.MINIMAL_BASIC;
        byte[] body = new byte[cfg.size];
        ByteBuffer stamp = ByteBuffer.wrap(body);
        for (int i = 0; i < cfg.prefill; i++) {
            stamp.putLong(0, System.nanoTime());
            ch.basicPublish("", queue, false, props, body);
            if ((i + 1) % 10_000 == 0) {
                ch.waitForConfirmsOrDie((long) (cfg.setupTimeout * 1000));
            }
        }
        ch.waitForConfirmsOrDie((long) (cfg.setupTimeout * 1000));
        ch.close();
        prefillSeconds = (System.nanoTime() - t) / 1e9;
    }

    Map<String, Object> idle() throws Exception {
        Map<String, Object> out = new LinkedHashMap<>();
        factory.useNio();                  // a few I/O threads instead of one per connection
        factory.setRequestedHeartbeat(0);  // truly idle: no heartbeat frames during the hold
        List<Connection> conns = new ArrayList<>();
        long t = System.nanoTime();
        try {
            for (int i = 0; i < cfg.idleConnections; i++) {
                try {
                    conns.add(factory.newConnection("perftest-idle-" + i));
                } catch (Exception e) {
                    throw new SetupError("connection " + (i + 1) + " of " + cfg.idleConnections
                                         + " failed: " + e);
                }
            }
            double openSeconds = (System.nanoTime() - t) / 1e9;
            Map<String, Object> readyLine = new LinkedHashMap<>();
            readyLine.put("event", "ready");
            readyLine.put("connections", conns.size());
            readyLine.put("open_seconds", openSeconds);
            readyLine.put("server", serverInfo(
                conns.isEmpty() ? Map.of() : conns.get(0).getServerProperties()));
            System.out.println(json(readyLine));
            System.out.flush();
            Thread stdin = new Thread(() -> {
                try {
                    new BufferedReader(
                        new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
                } catch (IOException ignored) {
                    // EOF or error: release the connections either way
                }
            }, "stdin");
            stdin.setDaemon(true);
            stdin.start();
            stdin.join((long) (cfg.hold * 1000));
            int open = 0;
            for (Connection c : conns) if (c.isOpen()) open++;
            out.put("mode", "idle-connections");
            out.put("connections", conns.size());
            out.put("still_open_at_release", open);
            out.put("open_seconds", openSeconds);
            out.put("server", readyLine.get("server"));
        } finally {
            for (Connection c : conns) {
                try {
                    c.abort(2_000);
                } catch (Throwable ignored) {
                    // best effort
                }
            }
        }
        return out;
    }

    static final class SetupError extends Exception {
        private static final long serialVersionUID = 1L;

        SetupError(String m) { super(m); }
    }

    static Thread start(String name, Runnable r) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        t.start();
        return t;
    }

    static Object ms(long ns) {
        return ns < 0 ? null : ns / 1e6;
    }

    static Map<String, Object> serverInfo(Map<String, Object> props) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (String k : new String[] {"product", "version", "platform"}) {
            Object v = props.get(k);
            m.put(k, v == null ? null : v.toString());
        }
        return m;
    }

    Map<String, Object> configMap() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("host", cfg.host);
        m.put("port", cfg.port);
        m.put("producers", cfg.producers);
        m.put("consumers", cfg.consumers);
        m.put("size", cfg.size);
        m.put("duration", cfg.duration);
        m.put("warmup", cfg.warmup);
        m.put("persistent", cfg.persistent);
        m.put("confirm", cfg.confirm);
        m.put("prefetch", cfg.prefetch);
        m.put("autoack", cfg.autoack);
        m.put("multi_ack_every", cfg.multiAckEvery);
        m.put("rate", cfg.rate);
        m.put("get", cfg.get);
        m.put("prefill", cfg.prefill);
        return m;
    }

    // ------------------------------------------------------------------ JSON output

    static String json(Object o) {
        StringBuilder sb = new StringBuilder();
        write(sb, o);
        return sb.toString();
    }

    @SuppressWarnings("unchecked")
    static void write(StringBuilder sb, Object o) {
        if (o == null) {
            sb.append("null");
        } else if (o instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<String, Object> e : ((Map<String, Object>) o).entrySet()) {
                if (!first) sb.append(", ");
                first = false;
                write(sb, e.getKey());
                sb.append(": ");
                write(sb, e.getValue());
            }
            sb.append('}');
        } else if (o instanceof List) {
            sb.append('[');
            boolean first = true;
            for (Object x : (List<Object>) o) {
                if (!first) sb.append(", ");
                first = false;
                write(sb, x);
            }
            sb.append(']');
        } else if (o instanceof Double || o instanceof Float) {
            double d = ((Number) o).doubleValue();
            sb.append(Double.isFinite(d) ? String.format(Locale.ROOT, "%.6g", d) : "null");
        } else if (o instanceof Number || o instanceof Boolean) {
            sb.append(o);
        } else {
            String s = o.toString();
            sb.append('"');
            for (char ch : s.toCharArray()) {
                if (ch == '"' || ch == '\\') sb.append('\\').append(ch);
                else if (ch < 0x20) sb.append(String.format("\\u%04x", (int) ch));
                else sb.append(ch);
            }
            sb.append('"');
        }
    }

    static void checkLoopback(String host) {
        try {
            for (InetAddress a : InetAddress.getAllByName(host)) {
                if (!a.isLoopbackAddress()) {
                    usage("--host must resolve to loopback addresses only: " + a);
                }
            }
        } catch (IOException e) {
            usage("cannot resolve --host " + host + ": " + e);
        }
    }

    public static void main(String[] args) throws Exception {
        Config cfg = parse(args);
        checkLoopback(cfg.host);
        PerfTest pt = new PerfTest(cfg);
        double limit = cfg.idleConnections > 0
            ? cfg.hold + 120 : cfg.duration + cfg.setupTimeout + 60;
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep((long) (limit * 1000));
            } catch (InterruptedException e) {
                return;
            }
            System.out.println(
                "{\"error\": \"watchdog: PerfTest did not finish within " + limit + " s\"}");
            System.out.flush();
            Runtime.getRuntime().halt(3);
        }, "watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        Map<String, Object> out;
        try {
            out = cfg.idleConnections > 0 ? pt.idle() : pt.run();
        } catch (SetupError e) {
            Map<String, Object> err = new LinkedHashMap<>();
            err.put("error", e.getMessage());
            System.out.println(json(err));
            System.out.flush();
            Runtime.getRuntime().halt(2);
            return;
        }
        List<Object> errs = new ArrayList<>(pt.errors);
        out.put("errors", errs);
        if (cfg.idleConnections == 0) {
            @SuppressWarnings("unchecked")
            Map<String, Object> lat = (Map<String, Object>) out.get("latency_ms");
            System.err.printf(Locale.ROOT,
                "published %.0f msg/s, consumed %.0f msg/s, confirmed %s msg/s, "
                + "latency p50/p95/p99 %s/%s/%s ms, backlog at end %s%n",
                (Double) out.get("published_per_s"), (Double) out.get("consumed_per_s"),
                out.get("confirmed_per_s") == null
                    ? "-" : String.format(Locale.ROOT, "%.0f", (Double) out.get("confirmed_per_s")),
                fmt(lat.get("p50")), fmt(lat.get("p95")), fmt(lat.get("p99")),
                out.get("backlog_at_end"));
        }
        for (Object e : errs) System.err.println("error: " + e);
        System.out.println(json(out));
        System.out.flush();
        Runtime.getRuntime().halt(errs.isEmpty() ? 0 : 1);
    }

    static String fmt(Object v) {
        return v == null ? "-" : String.format(Locale.ROOT, "%.2f", ((Number) v).doubleValue());
    }
}
