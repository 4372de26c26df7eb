package dev.rdq.json;

import java.util.AbstractMap;
import java.util.AbstractSet;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.Comparator;
import java.util.Iterator;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Set;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * The members of a {@link JsonObject}: an immutable map over two arrays in
 * the order the members arrived, sorted by key in Unicode code point order
 * only when iterated. Decoding an envelope looks members up and never
 * iterates them in order, so sorting (and a tree per object) is left out of
 * the hot path; a small object is searched linearly, a large one through a
 * hash index built with it.
 *
 * <p>While no key holds a UTF-16 unit at or above U+D800, String's own
 * order equals code point order and is used to sort; otherwise the code
 * point comparator is.
 */
final class Members extends AbstractMap<String, JsonValue> implements SortedMap<String, JsonValue> {
    static final Members EMPTY = new Members(new String[0], new JsonValue[0], 0, null);

    /** Up to this many members, lookups and the duplicate check scan the keys. */
    private static final int LINEAR = 12;

    private final String[] keys;
    private final JsonValue[] values;
    private final int size;
    private final HashMap<String, Integer> index;
    private volatile int[] order;

    private Members(String[] keys, JsonValue[] values, int size, HashMap<String, Integer> index) {
        this.keys = keys;
        this.values = values;
        this.size = size;
        this.index = index;
    }

    /**
     * The members {@code keys[0..n)} → {@code values[0..n)}; the arrays are
     * taken over. A key given twice is {@code JsonSyntaxException}
     * "duplicate key".
     */
    static Members adopt(String[] keys, JsonValue[] values, int n) throws JsonSyntaxException {
        if (n <= LINEAR) {
            for (int i = 1; i < n; i++) {
                for (int j = 0; j < i; j++) {
                    if (keys[i].equals(keys[j])) {
                        throw new JsonSyntaxException("duplicate key \"" + keys[i] + "\"");
                    }
                }
            }
            return new Members(keys, values, n, null);
        }
        HashMap<String, Integer> index = new HashMap<>(n * 2);
        for (int i = 0; i < n; i++) {
            if (index.putIfAbsent(keys[i], i) != null) {
                throw new JsonSyntaxException("duplicate key \"" + keys[i] + "\"");
            }
        }
        return new Members(keys, values, n, index);
    }

    /** An immutable copy of {@code m} (whose keys are distinct, being a map's). */
    static Members copyOf(Map<String, ? extends JsonValue> m) {
        if (m instanceof Members already) {
            return already;
        }
        int n = m.size();
        String[] k = new String[n];
        JsonValue[] v = new JsonValue[n];
        int i = 0;
        for (Map.Entry<String, ? extends JsonValue> e : m.entrySet()) {
            k[i] = java.util.Objects.requireNonNull(e.getKey(), "a JSON object key");
            v[i] = e.getValue();
            i++;
        }
        try {
            return adopt(k, v, n);
        } catch (JsonSyntaxException e) {
            throw new IllegalStateException("a map with equal keys", e);
        }
    }

    private int indexOf(Object key) {
        if (!(key instanceof String s)) {
            return -1;
        }
        if (index != null) {
            Integer i = index.get(s);
            return i == null ? -1 : i;
        }
        for (int i = 0; i < size; i++) {
            if (keys[i].equals(s)) {
                return i;
            }
        }
        return -1;
    }

    /** The positions of the members in code point order of their keys. */
    private int[] order() {
        int[] o = order;
        if (o != null) {
            return o;
        }
        boolean codePoint = false;
        boolean sorted = true;
        for (int i = 0; i < size; i++) {
            codePoint |= needsCodePointOrder(keys[i]);
        }
        Comparator<String> cmp = codePoint ? Json.CODE_POINT_ORDER : Comparator.naturalOrder();
        for (int i = 1; i < size && sorted; i++) {
            sorted = cmp.compare(keys[i - 1], keys[i]) < 0;
        }
        o = new int[size];
        if (sorted) {
            for (int i = 0; i < size; i++) {
                o[i] = i;
            }
        } else {
            Integer[] idx = new Integer[size];
            for (int i = 0; i < size; i++) {
                idx[i] = i;
            }
            Arrays.sort(idx, (x, y) -> cmp.compare(keys[x], keys[y]));
            for (int i = 0; i < size; i++) {
                o[i] = idx[i];
            }
        }
        order = o;
        return o;
    }

    static boolean needsCodePointOrder(String key) {
        for (int i = 0; i < key.length(); i++) {
            if (key.charAt(i) >= 0xd800) {
                return true;
            }
        }
        return false;
    }

    @Override
    public JsonValue get(Object key) {
        int i = indexOf(key);
        return i < 0 ? null : values[i];
    }

    @Override
    public boolean containsKey(Object key) {
        return indexOf(key) >= 0;
    }

    @Override
    public int size() {
        return size;
    }

    @Override
    public boolean isEmpty() {
        return size == 0;
    }

    @Override
    public Set<Map.Entry<String, JsonValue>> entrySet() {
        return new AbstractSet<>() {
            @Override
            public Iterator<Map.Entry<String, JsonValue>> iterator() {
                return new Iterator<>() {
                    private int i;

                    @Override
                    public boolean hasNext() {
                        return i < size;
                    }

                    private final int[] o = order();

                    @Override
                    public Map.Entry<String, JsonValue> next() {
                        if (i >= size) {
                            throw new NoSuchElementException();
                        }
                        int at = o[i++];
                        return new AbstractMap.SimpleImmutableEntry<>(keys[at], values[at]);
                    }
                };
            }

            @Override
            public int size() {
                return size;
            }
        };
    }

    @Override
    public Comparator<? super String> comparator() {
        return Json.CODE_POINT_ORDER;
    }

    @Override
    public String firstKey() {
        if (size == 0) {
            throw new NoSuchElementException();
        }
        return keys[order()[0]];
    }

    @Override
    public String lastKey() {
        if (size == 0) {
            throw new NoSuchElementException();
        }
        return keys[order()[size - 1]];
    }

    private SortedMap<String, JsonValue> tree() {
        TreeMap<String, JsonValue> t = new TreeMap<>(Json.CODE_POINT_ORDER);
        t.putAll(this);
        return t;
    }

    @Override
    public SortedMap<String, JsonValue> subMap(String fromKey, String toKey) {
        return Collections.unmodifiableSortedMap(tree().subMap(fromKey, toKey));
    }

    @Override
    public SortedMap<String, JsonValue> headMap(String toKey) {
        return Collections.unmodifiableSortedMap(tree().headMap(toKey));
    }

    @Override
    public SortedMap<String, JsonValue> tailMap(String fromKey) {
        return Collections.unmodifiableSortedMap(tree().tailMap(fromKey));
    }
}
