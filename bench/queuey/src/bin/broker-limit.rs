//! The broker's own ceiling for W1's work phase: how fast RabbitMQ delivers
//! and takes acks for persistent messages on a priority queue (the
//! arguments queuey and rdq use) with prefetch 64, when the consumer does
//! nothing but ack. No job queue can work faster on this broker; it is the
//! physical limit `rdq bench --store amqp://…` and queuey are compared to.
//!
//! `broker-limit [--jobs N] [--prefetch N] [--ack-every N] [--body-bytes N] [--handoff] [--in-flight N] [--channels N] [--url URL]`
//!
//! `--ack-every 1` acks each delivery on its own (queuey's way); a larger
//! value acks with `multiple` every N deliveries (rdq coalesces acks).
//! `--handoff` hands each delivery to a task of its own and acks from one
//! ack task: the fewest task switches a worker can add. The queue is filled
//! first with `--in-flight` publishes awaiting confirms at a time (64): its
//! rate is the submit side's ceiling, reported as `submit_per_s`. With
//! `--channels N` those publishes are spread over N confirm-mode channels
//! (rdq's publisher keeps one publish in flight on each of 64 channels).
//! Prints one JSON line.

use std::time::Instant;

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties};

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_owned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let jobs: u64 = arg(&args, "--jobs", "20000").parse()?;
    let prefetch: u16 = arg(&args, "--prefetch", "64").parse()?;
    let ack_every: u64 = arg(&args, "--ack-every", "1").parse::<u64>()?.max(1);
    let body_bytes: usize = arg(&args, "--body-bytes", "90").parse()?;
    let handoff = args.iter().any(|a| a == "--handoff");
    let in_flight: usize = arg(&args, "--in-flight", "64").parse::<usize>()?.max(1);
    let channels: usize = arg(&args, "--channels", "1").parse::<usize>()?.clamp(1, in_flight);
    let url = arg(&args, "--url", "amqp://guest:guest@127.0.0.1:5672/%2f");

    let conn = Connection::connect(&url, ConnectionProperties::default()).await?;
    let queue = format!(
        "broker-limit.{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos()
    );
    let mut queue_args = FieldTable::default();
    queue_args.insert("x-max-priority".into(), AMQPValue::ShortShortUInt(10));
    let setup = conn.create_channel().await?;
    setup
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            queue_args,
        )
        .await?;

    // Fill the queue: persistent bodies on `--channels` confirm-mode
    // channels, at most `--in-flight` publishes (shared out between the
    // channels) awaiting their confirm at any moment: the submit side's
    // ceiling for that many submits in flight.
    let filling = Instant::now();
    let mut fillers = Vec::with_capacity(channels);
    for c in 0..channels {
        let channel = conn.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        let share = jobs / channels as u64 + u64::from((c as u64) < jobs % channels as u64);
        let window = (in_flight / channels).max(1);
        let queue = queue.clone();
        fillers.push(tokio::spawn(async move {
            let body = vec![b'x'; body_bytes];
            let mut waiting = std::collections::VecDeque::new();
            for _ in 0..share {
                if waiting.len() >= window
                    && let Some(confirm) = waiting.pop_front()
                {
                    confirm.await?;
                }
                waiting.push_back(
                    channel
                        .basic_publish(
                            "".into(),
                            queue.as_str().into(),
                            BasicPublishOptions::default(),
                            &body,
                            BasicProperties::default()
                                .with_delivery_mode(2)
                                .with_priority(0),
                        )
                        .await?,
                );
            }
            for confirm in waiting {
                confirm.await?;
            }
            Ok::<(), lapin::Error>(())
        }));
    }
    for filler in fillers {
        filler.await??;
    }
    let submit_per_s = jobs as f64 / filling.elapsed().as_secs_f64();

    // Drain it: the only work is the ack.
    let channel = conn.create_channel().await?;
    channel
        .basic_qos(prefetch, BasicQosOptions { global: false })
        .await?;
    let mut consumer = channel
        .basic_consume(
            queue.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let start = Instant::now();
    let mut received = 0u64;
    if handoff {
        // What a worker adds at the least: each delivery goes to a task of
        // its own, which passes it to one ack task; that task acks the
        // highest tag it has with `multiple` whenever it wakes.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<lapin::message::Delivery>();
        let acking = tokio::spawn(async move {
            let (mut seen, mut acked) = (0u64, 0u64);
            let mut batch = Vec::new();
            while seen < jobs && rx.recv_many(&mut batch, 64).await > 0 {
                seen += batch.len() as u64;
                if let Some(last) = batch.iter().max_by_key(|d| d.delivery_tag)
                    && last.delivery_tag > acked
                {
                    acked = last.delivery_tag;
                    last.acker.ack(BasicAckOptions { multiple: true }).await?;
                }
                batch.clear();
            }
            Ok::<(), lapin::Error>(())
        });
        while received < jobs {
            let Some(delivery) = consumer.next().await else {
                break;
            };
            let delivery = delivery?;
            received += 1;
            let tx = tx.clone();
            tokio::spawn(async move {
                let _ = tx.send(delivery);
            });
        }
        acking.await??;
    }
    while received < jobs {
        let Some(delivery) = consumer.next().await else {
            break;
        };
        let delivery = delivery?;
        received += 1;
        if received.is_multiple_of(ack_every) || received == jobs {
            delivery
                .acker
                .ack(BasicAckOptions {
                    multiple: ack_every > 1,
                })
                .await?;
        }
    }
    let elapsed = start.elapsed();
    setup
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await?;
    println!(
        "{{\"system\":\"broker limit (lapin, ack only)\",\"jobs\":{received},\"prefetch\":{prefetch},\"ack_every\":{ack_every},\"body_bytes\":{body_bytes},\"handoff\":{handoff},\"in_flight\":{in_flight},\"channels\":{channels},\"submit_per_s\":{submit_per_s:.0},\"work_per_s\":{:.0}}}",
        received as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}
