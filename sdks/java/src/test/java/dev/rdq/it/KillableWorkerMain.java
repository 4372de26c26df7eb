package dev.rdq.it;

import dev.rdq.client.RdqClient;
import dev.rdq.worker.Worker;
import dev.rdq.worker.WorkerTransport;

/**
 * A worker in its own JVM whose handler never returns, for the test that
 * kills it with SIGKILL mid-task. Prints {@code RUNNING <id>} when a handler starts.
 */
public final class KillableWorkerMain {
    private KillableWorkerMain() {}

    public static void main(String[] args) throws Exception {
        RdqClient client = RdqClient.builder(args[0]).build();
        Worker.builder(client)
                .transport(WorkerTransport.valueOf(args[2]))
                .handler(args[1], task -> {
                    System.out.println("RUNNING " + task.id());
                    System.out.flush();
                    Thread.sleep(Long.MAX_VALUE);
                })
                .start();
        Thread.sleep(Long.MAX_VALUE);
    }
}
