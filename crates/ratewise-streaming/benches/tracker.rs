//! Cost of the metered-body hot path: feeding a recorded stream to a
//! `StreamTracker` in network-sized and tiny frames.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ratewise_core::Provider;
use ratewise_streaming::sse::SseDecoder;
use ratewise_streaming::{StreamTracker, TrackerConfig};

fn stream() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/streams/anthropic-complete.sse"
    );
    std::fs::read(path).unwrap()
}

fn bench(c: &mut Criterion) {
    let bytes = stream();
    let mut group = c.benchmark_group("anthropic-complete");
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    for frame in [16usize, 1400, usize::MAX / 2] {
        group.bench_with_input(
            BenchmarkId::new("tracker.observe", frame),
            &frame,
            |b, &f| {
                b.iter(|| {
                    let mut t = StreamTracker::new(Provider::Anthropic, TrackerConfig::default());
                    for chunk in bytes.chunks(f) {
                        t.observe(chunk).unwrap();
                    }
                    t.outcome(true)
                })
            },
        );
        group.bench_with_input(BenchmarkId::new("decoder only", frame), &frame, |b, &f| {
            let mut out = Vec::new();
            b.iter(|| {
                let mut d = SseDecoder::new();
                out.clear();
                for chunk in bytes.chunks(f) {
                    d.push_into(chunk, &mut out).unwrap();
                }
                out.len()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
