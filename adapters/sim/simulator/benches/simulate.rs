//! Simulator throughput: a whole run of 2,000 Servers with the default fault
//! mix (about 22,000 steps, reported as elements), on one thread and on all cores. Figures for
//! 100,000 Servers come from `server-controller simulate --servers 100000`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use server_simulator::{SimConfig, run};

fn benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("simulate");
    group.sample_size(10);
    for (name, threads) in [("2000 servers, 1 thread", 1), ("2000 servers, all cores", 0)] {
        // Four shards, so all cores have work; the steps are the same either way.
        let config = SimConfig { threads, shard_size: 500, ..SimConfig::new(2_000, 1) };
        group.throughput(Throughput::Elements(run(&config).steps));
        group.bench_function(name, |b| b.iter(|| black_box(run(black_box(&config)))));
    }
    group.finish();
}

criterion_group!(simulate, benches);
criterion_main!(simulate);
