package dev.rdq.client;

import dev.rdq.envelope.Envelope;

/** A task handed out by a claim: present {@code leaseToken} when settling or extending. */
public record ClaimedTask(String id, String leaseToken, Envelope envelope) {}
