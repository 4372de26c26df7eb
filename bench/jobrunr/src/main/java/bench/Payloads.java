package bench;

/** The W1 task: a no-op with a JSON payload of about 100 bytes. */
final class Payloads {
    private Payloads() {}

    static String json(int i) {
        String head = "{\"job\":" + i + ",\"kind\":\"w1\",\"data\":\"";
        StringBuilder b = new StringBuilder(head);
        while (b.length() < 98) {
            b.append('x');
        }
        return b.append("\"}").toString();
    }
}
