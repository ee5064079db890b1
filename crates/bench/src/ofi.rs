//! `mu bench fabric --fabric ofi`: round trips of one-sided operations on the libfabric fabric
//! (provider `sockets` or the one `--provider` names, over loopback TCP), and the two-target
//! write round that is the floor of a leader replicating to two followers (`mu bench
//! replication --fabric ofi` measures it too).
//!
//! All three nodes live in this process: on this fabric the provider's own threads apply a
//! peer's operations, so the target needs no thread of the benchmark's. A completion means the
//! target applied the operation (`FI_DELIVERY_COMPLETE`), so each figure is one network round
//! trip through the provider on both sides, with no answer written by the peer.

use crate::measure::{measure, Summary};
use crate::ofi_loopback::{free_port_block, loopback_config};
use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, NodeId, RegionId, RemoteAddr, Source, WorkRequest,
};
use mu_fabric_ofi::{OfiEndpoint, OfiFabric};
use serde_json::json;
use std::time::{Duration, Instant};

const REGION: RegionId = RegionId(0);
const REGION_BYTES: usize = 4096;
const CHANNEL: u8 = 0;
const PAYLOAD_BYTES: usize = 64;
/// How long one operation may take before the benchmark gives up.
const OP_TIMEOUT: Duration = Duration::from_secs(10);

struct Trio {
    a: OfiFabric,
    _peers: Vec<OfiFabric>,
    ep: OfiEndpoint,
    b: ConnId,
    c: ConnId,
}

fn trio(provider: &str, base_port: u16) -> Result<Trio, String> {
    let open =
        |n| OfiFabric::open(loopback_config(provider, base_port, 3, n)).map_err(|e| e.to_string());
    let nodes = [open(0)?, open(1)?, open(2)?];
    for n in &nodes {
        n.register_region(REGION, REGION_BYTES, Access::ALL).map_err(|e| e.to_string())?;
    }
    for (i, n) in nodes.iter().enumerate().skip(1) {
        n.connect(ConnId::new(NodeId(0), CHANNEL), Access::ALL).map_err(|e| e.to_string())?;
        nodes[0]
            .connect(ConnId::new(NodeId(i as u16), CHANNEL), Access::ALL)
            .map_err(|e| e.to_string())?;
    }
    let (b, c) = (ConnId::new(NodeId(1), CHANNEL), ConnId::new(NodeId(2), CHANNEL));
    let mut ep = nodes[0].endpoint(64).map_err(|e| e.to_string())?;
    ep.attach(b).map_err(|e| e.to_string())?;
    ep.attach(c).map_err(|e| e.to_string())?;
    let [a, pb, pc] = nodes;
    Ok(Trio { a, _peers: vec![pb, pc], ep, b, c })
}

fn complete(ep: &mut OfiEndpoint, count: usize) -> Result<(), String> {
    let mut out = [Completion::EMPTY; 2];
    let mut seen = 0;
    let start = Instant::now();
    while seen < count {
        let n = ep.poll(&mut out[..count - seen]);
        for c in &out[..n] {
            if !c.status.is_success() {
                return Err(format!("operation failed: {:?}", c.status));
            }
        }
        seen += n;
        if n == 0 {
            if start.elapsed() > OP_TIMEOUT {
                return Err(format!("no completion within {OP_TIMEOUT:?}"));
            }
            std::thread::yield_now();
        }
    }
    Ok(())
}

fn payload(i: u64) -> [u8; PAYLOAD_BYTES] {
    let mut p = [0u8; PAYLOAD_BYTES];
    p[..8].copy_from_slice(&i.to_le_bytes());
    p
}

fn remote(offset: u64) -> RemoteAddr {
    RemoteAddr { region: REGION, offset }
}

/// The two-target write round on ofi: 64 bytes written to two peers, timed until both
/// completions are in.
fn measure_write2(t: &mut Trio, samples: u64) -> Result<Summary, String> {
    let (b, c) = (t.b, t.c);
    measure("write2_rtt", samples, |i| {
        let p = payload(i);
        t.ep.post(b, &WorkRequest::write(i, Source::Inline(&p), remote(0)))
            .map_err(|e| e.to_string())?;
        t.ep.post(c, &WorkRequest::write(i, Source::Inline(&p), remote(0)))
            .map_err(|e| e.to_string())?;
        complete(&mut t.ep, 2)
    })
}

/// The two-target write round alone, on three fresh loopback nodes of `provider`.
pub fn write2_rtt(provider: &str, samples: u64) -> Result<Summary, String> {
    let mut t = trio(provider, free_port_block(3)?)?;
    measure_write2(&mut t, samples)
}

pub fn run(json_out: bool, samples: u64, provider: &str) -> Result<(), String> {
    let base = free_port_block(3)?;
    let mut t = trio(provider, base)?;
    note!(
        "mu bench fabric: ofi (provider {}), {samples} samples per figure, 3 nodes in this \
         process on loopback",
        t.a.provider()
    );
    let b = t.b;
    let write = measure("write_rtt", samples, |i| {
        let p = payload(i);
        t.ep.post(b, &WorkRequest::write(i, Source::Inline(&p), remote(0)))
            .map_err(|e| e.to_string())?;
        complete(&mut t.ep, 1)
    })?;
    let scratch = mu_fabric::LocalSlice { region: REGION, offset: 2048, len: PAYLOAD_BYTES as u32 };
    let read = measure("read_rtt", samples, |i| {
        t.ep.post(b, &WorkRequest::read(i, scratch, remote(0))).map_err(|e| e.to_string())?;
        complete(&mut t.ep, 1)
    })?;
    let cas = measure("cas_rtt", samples, |i| {
        t.ep.post(b, &WorkRequest::compare_swap(i, remote(1024), i - 1, i))
            .map_err(|e| e.to_string())?;
        complete(&mut t.ep, 1)
    })?;
    let write2 = measure_write2(&mut t, samples)?;
    if json_out {
        let doc = json!({
            "backend": "ofi",
            "provider": t.a.provider(),
            "payload_bytes": PAYLOAD_BYTES,
            "write_rtt_ns": write.json(),
            "read_rtt_ns": read.json(),
            "cas_rtt_ns": cas.json(),
            "write2_rtt_ns": write2.json(),
        });
        println!("{}", serde_json::to_string_pretty(&doc).expect("json"));
    } else {
        println!(
            "ofi fabric (provider {}), {PAYLOAD_BYTES}-byte payloads, round trips (ns)",
            t.a.provider()
        );
        println!("{:<12} {:>10} {:>10} {:>10} {:>10}", "figure", "p50", "p99", "p99.9", "mean");
        for (name, s) in [("write", &write), ("read", &read), ("cas", &cas), ("write2", &write2)] {
            println!("{name:<12} {:>10} {:>10} {:>10} {:>10.0}", s.p50, s.p99, s.p999, s.mean);
        }
    }
    Ok(())
}
