// An independent load generator for bench/javagen.py, built on RabbitMQ's Java client
// (com.rabbitmq.client), in the spirit of RabbitMQ's PerfTest
// (https://www.rabbitmq.com/docs/perf-tools): producers and consumers on their own
// connections, publisher confirms with a window, manual or automatic acks.
//
// Each body starts with the producer's number (int), the message's sequence number
// (int) and the System.nanoTime() of its send (long): 16 bytes, padded to --size. Producers
// and consumers share one JVM, so one clock measures confirm and end-to-end latency, and
// the consumers' receipts show loss and duplicates. Prints one JSON object, shaped like
// `kanin perf --json`'s summary so bench/ reads both the same way.

import com.rabbitmq.client.AMQP;
import com.rabbitmq.client.Channel;
import com.rabbitmq.client.Connection;
import com.rabbitmq.client.ConnectionFactory;
import com.rabbitmq.client.DefaultConsumer;
import com.rabbitmq.client.Envelope;
import com.rabbitmq.client.MessageProperties;
import java.lang.management.ManagementFactory;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

public final class KaninPerf {
    static final int HEADER = 16;

    /** Command-line options, with PerfTest-like short names for the counts. */
    static final class Options {
        String uri = "amqp://guest:guest@127.0.0.1:5672/%2F";
        int producers = 1, consumers = 1, queues = 1, size = 16;
        String prefix = "javaperf-";
        double durationS = 10, rate = 0; // rate: msg/s per producer, 0 = as fast as it goes
        int confirmWindow = 0; // 0 = no confirms
        boolean autoAck = true, persistent = false, durable = false;
        int prefetch = 0, multiAckEvery = 1;
        double confirmTimeoutS = 10, drainTimeoutS = 10;

        static Options parse(String[] args) {
            Options o = new Options();
            for (int i = 0; i < args.length; i++) {
                String a = args[i];
                switch (a) {
                    case "--persistent": o.persistent = true; continue;
                    case "--durable": o.durable = true; continue;
                    default: break;
                }
                if (i + 1 >= args.length) throw new IllegalArgumentException(a + " needs a value");
                String v = args[++i];
                switch (a) {
                    case "--uri": o.uri = v; break;
                    case "-x": case "--producers": o.producers = Integer.parseInt(v); break;
                    case "-y": case "--consumers": o.consumers = Integer.parseInt(v); break;
                    case "--queues": o.queues = Integer.parseInt(v); break;
                    case "--queue-prefix": o.prefix = v; break;
                    case "-s": case "--size": o.size = Integer.parseInt(v); break;
                    case "--duration": o.durationS = Double.parseDouble(v); break;
                    case "--rate": o.rate = Double.parseDouble(v); break;
                    case "--confirm": o.confirmWindow = Integer.parseInt(v); break;
                    case "--ack": o.autoAck = v.equals("auto"); break;
                    case "--prefetch": o.prefetch = Integer.parseInt(v); break;
                    case "--multi-ack-every": o.multiAckEvery = Integer.parseInt(v); break;
                    case "--confirm-timeout": o.confirmTimeoutS = Double.parseDouble(v); break;
                    case "--drain-timeout": o.drainTimeoutS = Double.parseDouble(v); break;
                    default: throw new IllegalArgumentException("unknown option " + a);
                }
            }
            if (o.size < HEADER) throw new IllegalArgumentException("--size must be >= " + HEADER);
            if (o.queues < 1 || o.producers < 0 || o.consumers < 0 || o.multiAckEvery < 1) {
                throw new IllegalArgumentException("--queues and --multi-ack-every must be >= 1");
            }
            return o;
        }

        String queue(int index) {
            return prefix + (index % queues);
        }
    }

    /** Latencies in microseconds, kept whole: a 10 s point holds at most a few million. */
    static final class Latencies {
        int[] values = new int[1024];
        int count;

        void add(long micros) {
            if (count == values.length) values = Arrays.copyOf(values, count * 2);
            values[count++] = (int) Math.min(micros, Integer.MAX_VALUE);
        }

        static String summary(List<Latencies> parts) {
            int total = 0;
            for (Latencies l : parts) total += l.count;
            int[] all = new int[total];
            int at = 0;
            for (Latencies l : parts) {
                System.arraycopy(l.values, 0, all, at, l.count);
                at += l.count;
            }
            Arrays.sort(all);
            StringBuilder out = new StringBuilder("{\"count\": " + total);
            String[] names = {"p50", "p95", "p99", "p99.9"};
            double[] quantiles = {0.50, 0.95, 0.99, 0.999};
            for (int i = 0; i < names.length; i++) {
                int rank = (int) Math.ceil(quantiles[i] * total) - 1;
                out.append(", \"").append(names[i]).append("\": ");
                out.append(total == 0 ? 0 : all[Math.max(rank, 0)]);
            }
            return out.append(", \"max\": ").append(total == 0 ? 0 : all[total - 1]).append("}").toString();
        }
    }

    /** One producer: its own connection and channel, publishing to one queue. */
    static final class Producer implements Runnable {
        final Options o;
        final int id;
        final String queue;
        final Connection connection;
        final Channel channel;
        final Latencies confirmLatency = new Latencies();
        // Send times of unconfirmed publishes by delivery tag (a ring: tags are 1, 2, ...).
        final long[] sentNs;
        final boolean[] settled;
        final int mask;
        long published, confirmed, nacked, low = 1; // low: the oldest unsettled tag
        volatile long lastPublishNs, lastConfirmNs;
        volatile boolean stop;
        volatile String error;
        long startNs;

        Producer(Options o, int id, ConnectionFactory factory) throws Exception {
            this.o = o;
            this.id = id;
            this.queue = o.queue(id);
            this.connection = factory.newConnection("javaperf-producer-" + id);
            this.channel = connection.createChannel();
            int ring = Integer.highestOneBit(Math.max(o.confirmWindow, 1) * 2);
            sentNs = new long[ring];
            settled = new boolean[ring];
            mask = ring - 1;
            if (o.confirmWindow > 0) {
                channel.confirmSelect();
                channel.addConfirmListener((tag, multiple) -> settle(tag, multiple, true),
                        (tag, multiple) -> settle(tag, multiple, false));
            }
        }

        synchronized void settle(long tag, boolean multiple, boolean ack) {
            long now = System.nanoTime();
            for (long t = multiple ? low : tag; t <= tag; t++) {
                int slot = (int) (t & mask);
                if (t < low || settled[slot]) continue;
                settled[slot] = true;
                if (ack) {
                    confirmed++;
                    confirmLatency.add((now - sentNs[slot]) / 1000);
                } else {
                    nacked++;
                }
            }
            while (low <= published && settled[(int) (low & mask)]) {
                settled[(int) (low & mask)] = false;
                low++;
            }
            if (ack) lastConfirmNs = now;
            notifyAll();
        }

        synchronized long inFlight() {
            return published - (low - 1);
        }

        public void run() {
            try {
                publish();
            } catch (Exception e) {
                error = "producer " + id + ": " + e;
            }
        }

        void publish() throws Exception {
            AMQP.BasicProperties props = o.persistent ? MessageProperties.PERSISTENT_BASIC : null;
            ByteBuffer body = ByteBuffer.allocate(o.size);
            long endNs = startNs + (long) (o.durationS * 1e9);
            while (!stop) {
                long now = System.nanoTime();
                if (now >= endNs) break;
                if (o.rate > 0) {
                    long nextNs = startNs + (long) (published * 1e9 / o.rate);
                    if (nextNs > now) {
                        LockSupport.parkNanos(Math.min(nextNs, endNs) - now);
                        continue;
                    }
                }
                if (o.confirmWindow > 0) {
                    synchronized (this) {
                        while (published - (low - 1) >= o.confirmWindow && !stop) {
                            wait(Math.max(1, (endNs - System.nanoTime()) / 1_000_000));
                            if (System.nanoTime() >= endNs) break;
                        }
                        if (published - (low - 1) >= o.confirmWindow) continue;
                    }
                }
                now = System.nanoTime();
                long seq = published + 1;
                body.putInt(0, id).putInt(4, (int) seq).putLong(8, now);
                synchronized (this) {
                    sentNs[(int) (seq & mask)] = now;
                    published = seq;
                }
                channel.basicPublish("", queue, props, body.array());
                lastPublishNs = now;
            }
        }

        /** After publishing: wait until every publish is settled or the timeout passes. */
        synchronized void awaitConfirms(long deadlineNs) throws InterruptedException {
            while (o.confirmWindow > 0 && low <= published) {
                long left = deadlineNs - System.nanoTime();
                if (left <= 0) return;
                wait(Math.max(1, left / 1_000_000));
            }
        }
    }

    /** One consumer: its own connection and channel on one queue; counts receipts. */
    static final class Consumer extends DefaultConsumer {
        final Options o;
        final Latencies e2eLatency = new Latencies();
        final List<byte[]> receipts = new ArrayList<>(); // per producer: times each seq came
        volatile long consumed, unique, foreign, lastConsumeNs;
        long unacked, lastTag;

        Consumer(Options o, Channel channel) {
            super(channel);
            this.o = o;
        }

        @Override
        public void handleDelivery(String tag, Envelope envelope, AMQP.BasicProperties props,
                                   byte[] body) throws java.io.IOException {
            long now = System.nanoTime();
            ByteBuffer b = ByteBuffer.wrap(body);
            int producer = body.length >= HEADER ? b.getInt(0) : -1;
            int seq = body.length >= HEADER ? b.getInt(4) : -1;
            synchronized (this) {
                consumed++;
                lastConsumeNs = now;
                if (producer < 0 || producer >= o.producers || seq < 1) {
                    foreign++;
                } else {
                    e2eLatency.add((now - b.getLong(8)) / 1000);
                    while (receipts.size() <= producer) receipts.add(new byte[0]);
                    byte[] counts = receipts.get(producer);
                    if (seq >= counts.length) {
                        counts = Arrays.copyOf(counts, Math.max(seq + 1, counts.length * 2));
                        receipts.set(producer, counts);
                    }
                    if (counts[seq] == 0) unique++;
                    if (counts[seq] < Byte.MAX_VALUE) counts[seq]++;
                }
                if (!o.autoAck) {
                    lastTag = envelope.getDeliveryTag();
                    if (++unacked >= o.multiAckEvery) {
                        getChannel().basicAck(lastTag, true);
                        unacked = 0;
                    }
                }
            }
        }

        /** The deliveries short of a full multiple-ack batch, acked when the run ends. */
        synchronized void flushAcks() throws java.io.IOException {
            if (!o.autoAck && unacked > 0) {
                getChannel().basicAck(lastTag, true);
                unacked = 0;
            }
        }
    }

    public static void main(String[] args) throws Exception {
        Options o;
        try {
            o = Options.parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println("KaninPerf: " + e.getMessage());
            System.exit(2);
            return;
        }
        List<String> errors = Collections.synchronizedList(new ArrayList<>());
        ConnectionFactory factory = new ConnectionFactory();
        factory.setUri(o.uri);
        factory.setAutomaticRecoveryEnabled(false); // a broken connection is an error here
        // One small pool runs every consumer's callbacks (each channel's stay in order).
        ExecutorService pool = Executors.newFixedThreadPool(
                Math.max(2, Runtime.getRuntime().availableProcessors()));
        factory.setSharedExecutor(pool);

        Connection admin = factory.newConnection("javaperf-admin");
        Channel declare = admin.createChannel();
        int queueCount = Math.min(o.queues, Math.max(Math.max(o.producers, o.consumers), 1));
        for (int q = 0; q < queueCount; q++) declare.queueDeclare(o.queue(q), o.durable, false, false, null);

        List<Consumer> consumers = new ArrayList<>();
        List<Connection> connections = new ArrayList<>();
        for (int i = 0; i < o.consumers; i++) {
            Connection c = factory.newConnection("javaperf-consumer-" + i);
            connections.add(c);
            Channel ch = c.createChannel();
            if (o.prefetch > 0) ch.basicQos(o.prefetch);
            Consumer consumer = new Consumer(o, ch);
            ch.basicConsume(o.queue(i), o.autoAck, consumer);
            consumers.add(consumer);
        }
        List<Producer> producers = new ArrayList<>();
        for (int i = 0; i < o.producers; i++) {
            Producer p = new Producer(o, i, factory);
            connections.add(p.connection);
            producers.add(p);
        }
        double cpuBefore = processCpuS();
        long startNs = System.nanoTime();
        List<Thread> threads = new ArrayList<>();
        for (Producer p : producers) {
            p.startNs = startNs;
            Thread t = new Thread(p, "producer-" + p.id);
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) t.join();
        long confirmDeadline = System.nanoTime() + (long) (o.confirmTimeoutS * 1e9);
        for (Producer p : producers) p.awaitConfirms(confirmDeadline);

        long expected = 0;
        for (Producer p : producers) {
            if (p.error != null) errors.add(p.error);
            synchronized (p) {
                expected += o.confirmWindow > 0 ? p.confirmed : p.published;
            }
        }
        drain(o, consumers, expected);
        for (Consumer c : consumers) {
            try {
                c.flushAcks();
            } catch (Exception e) {
                errors.add("consumer ack: " + e);
            }
        }
        double generatorCpuS = processCpuS() - cpuBefore;
        for (Connection c : connections) closeQuietly(c, errors);
        for (int q = 0; q < queueCount; q++) declare.queueDelete(o.queue(q));
        admin.close();
        pool.shutdown();
        pool.awaitTermination(5, TimeUnit.SECONDS);
        System.out.println(summary(o, producers, consumers, errors, startNs, generatorCpuS));
    }

    /** Wait until consumers hold every expected message, or make no progress for a while. */
    static void drain(Options o, List<Consumer> consumers, long expected) throws InterruptedException {
        if (consumers.isEmpty()) return;
        long last = -1, since = System.nanoTime();
        while (true) {
            long unique = 0;
            for (Consumer c : consumers) unique += c.unique;
            if (unique >= expected) return;
            long now = System.nanoTime();
            if (unique != last) {
                last = unique;
                since = now;
            } else if (now - since > o.drainTimeoutS * 1e9) {
                return;
            }
            Thread.sleep(5);
        }
    }

    static void closeQuietly(Connection c, List<String> errors) {
        try {
            c.close(5000);
        } catch (Exception e) {
            errors.add("close: " + e);
        }
    }

    static double processCpuS() {
        java.lang.management.OperatingSystemMXBean os = ManagementFactory.getOperatingSystemMXBean();
        if (os instanceof com.sun.management.OperatingSystemMXBean) {
            return ((com.sun.management.OperatingSystemMXBean) os).getProcessCpuTime() / 1e9;
        }
        return 0;
    }

    static String summary(Options o, List<Producer> producers, List<Consumer> consumers,
                          List<String> errors, long startNs, double generatorCpuS) {
        long published = 0, confirmed = 0, nacked = 0, lastPublish = 0, lastConfirm = 0;
        long consumed = 0, unique = 0, foreign = 0, lastConsume = 0;
        List<Latencies> confirmLat = new ArrayList<>(), e2eLat = new ArrayList<>();
        for (Producer p : producers) {
            synchronized (p) {
                published += p.published;
                confirmed += p.confirmed;
                nacked += p.nacked;
                confirmLat.add(p.confirmLatency);
            }
            lastPublish = Math.max(lastPublish, p.lastPublishNs);
            lastConfirm = Math.max(lastConfirm, p.lastConfirmNs);
        }
        // Per producer, how often each sequence number arrived, over all consumers.
        int[][] counts = new int[o.producers][];
        for (Consumer c : consumers) {
            synchronized (c) {
                consumed += c.consumed;
                unique += c.unique;
                foreign += c.foreign;
                lastConsume = Math.max(lastConsume, c.lastConsumeNs);
                e2eLat.add(c.e2eLatency);
                for (int p = 0; p < c.receipts.size(); p++) {
                    byte[] got = c.receipts.get(p);
                    if (counts[p] == null) counts[p] = new int[0];
                    if (got.length > counts[p].length) counts[p] = Arrays.copyOf(counts[p], got.length);
                    for (int s = 0; s < got.length; s++) counts[p][s] += got[s];
                }
            }
        }
        boolean confirms = o.confirmWindow > 0;
        long lost = 0, duplicates = 0, unknown = 0;
        for (Producer p : producers) {
            int[] got = counts[p.id] == null ? new int[0] : counts[p.id];
            // Without confirms every published message is owed; with them, the confirmed
            // ones (a nack or a missing confirm is reported on its own).
            long owed = p.published;
            for (int s = 1; s < got.length; s++) {
                if (got[s] > 1) duplicates += got[s] - 1;
                if (got[s] > 0 && s > p.published) unknown += got[s];
            }
            for (long s = 1; s <= owed; s++) {
                boolean received = s < got.length && got[(int) s] > 0;
                if (!received && (!confirms || wasConfirmed(p, s))) lost++;
            }
        }
        long unconfirmed = confirms ? published - confirmed - nacked : 0;
        boolean ok = errors.isEmpty() && (consumers.isEmpty() || lost == 0) && duplicates == 0
                && unknown == 0 && foreign == 0 && unconfirmed == 0 && nacked == 0;
        StringBuilder j = new StringBuilder("{");
        j.append("\"ok\": ").append(ok);
        j.append(", \"generator\": \"java ").append(jsonEscape(clientVersion())).append("\"");
        j.append(", \"errors\": [");
        for (int i = 0; i < errors.size(); i++) {
            j.append(i > 0 ? ", " : "").append('"').append(jsonEscape(errors.get(i))).append('"');
        }
        j.append("], \"config\": {\"producers\": ").append(o.producers);
        j.append(", \"consumers\": ").append(o.consumers).append(", \"queues\": ").append(o.queues);
        j.append(", \"size\": ").append(o.size).append(", \"persistent\": ").append(o.persistent);
        j.append(", \"durable\": ").append(o.durable);
        j.append(", \"confirm\": \"").append(confirms ? "window:" + o.confirmWindow : "none").append('"');
        j.append(", \"ack\": \"").append(o.autoAck ? "auto" : "manual").append('"');
        j.append(", \"prefetch\": ").append(o.prefetch);
        j.append(", \"multi_ack_every\": ").append(o.multiAckEvery);
        j.append(", \"rate\": ").append(o.rate).append(", \"duration_s\": ").append(o.durationS);
        j.append("}, \"published\": ").append(published);
        j.append(", \"confirmed\": ").append(confirms ? String.valueOf(confirmed) : "null");
        j.append(", \"nacked\": ").append(confirms ? String.valueOf(nacked) : "null");
        j.append(", \"unconfirmed\": ").append(confirms ? String.valueOf(unconfirmed) : "null");
        j.append(", \"consumed\": ").append(consumed).append(", \"consumed_unique\": ").append(unique);
        j.append(", \"foreign\": ").append(foreign);
        j.append(", \"lost\": ").append(consumers.isEmpty() ? "null" : String.valueOf(lost));
        j.append(", \"duplicates\": ").append(duplicates).append(", \"unknown\": ").append(unknown);
        j.append(", \"rates\": {\"publish\": ").append(rate(published, lastPublish, startNs));
        j.append(", \"confirm\": ").append(rate(confirmed, lastConfirm, startNs));
        j.append(", \"consume\": ").append(rate(consumed, lastConsume, startNs));
        j.append("}, \"elapsed_s\": {\"publish\": ").append(seconds(lastPublish, startNs));
        j.append(", \"confirm\": ").append(seconds(lastConfirm, startNs));
        j.append(", \"consume\": ").append(seconds(lastConsume, startNs));
        j.append("}, \"latency_us\": {\"confirm\": ").append(Latencies.summary(confirmLat));
        j.append(", \"end_to_end\": ").append(Latencies.summary(e2eLat));
        j.append("}, \"generator_cpu_s\": ").append(String.format(Locale.ROOT, "%.3f", generatorCpuS));
        return j.append("}").toString();
    }

    /** Whether message s of producer p was acked by the broker (its ring slot is reused, so
     *  ask the counts instead: every tag below `low` was settled, and nacks are reported). */
    static boolean wasConfirmed(Producer p, long s) {
        return s < p.low && p.nacked == 0;
    }

    static String rate(long count, long lastNs, long startNs) {
        if (count == 0 || lastNs <= startNs) return "0.0";
        return String.format(Locale.ROOT, "%.1f", count / ((lastNs - startNs) / 1e9));
    }

    static String seconds(long lastNs, long startNs) {
        return String.format(Locale.ROOT, "%.3f", Math.max(0, lastNs - startNs) / 1e9);
    }

    static String clientVersion() {
        Package p = ConnectionFactory.class.getPackage();
        String v = p == null ? null : p.getImplementationVersion();
        return "amqp-client " + (v == null ? "?" : v);
    }

    static String jsonEscape(String s) {
        StringBuilder out = new StringBuilder();
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') out.append('\\').append(c);
            else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
            else out.append(c);
        }
        return out.toString();
    }
}
