//! `mu bench fabric --fabric ofi`: round trips of one-sided operations on the libfabric fabric
//! (provider `sockets` or the one `--provider` names, over loopback TCP), and the two-target
//! write round that is the floor of a leader replicating to two followers (`mu bench
//! replication --fabric ofi` measures it too).
//!
//! All three nodes live in this process: on this fabric the provider's own threads apply a
//! peer's operations, so the target needs no thread of the benchmark's. A completion means the
//! target applied the operation (`FI_DELIVERY_COMPLETE`), so each figure is one network round
//! trip through the provider on both sides, with no answer written by the peer.

use crate::fabric::{measure, Summary};
use mu_fabric::{
    Access, Completion, ConnId, Endpoint, Fabric, NodeId, RegionId, RemoteAddr, Source, WorkRequest,
};
use mu_fabric_ofi::{NodeAddr, OfiConfig, OfiEndpoint, OfiFabric, PORTS_PER_NODE, PROVIDERS};
use serde_json::json;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, TcpListener};
use std::time::{Duration, Instant};

const CLUSTER_ID: u64 = 0x6d75_6f66_6962;
const REGION: RegionId = RegionId(0);
const REGION_BYTES: usize = 4096;
const CHANNEL: u8 = 0;
const PAYLOAD_BYTES: usize = 64;
/// How long one operation may take before the benchmark gives up.
const OP_TIMEOUT: Duration = Duration::from_secs(10);
const FIRST_PORT: u16 = 21_000;
const LAST_PORT: u16 = 59_000;

/// Where node `n` listens with `provider`, its block of ports from the cluster's base port on:
/// 127.0.0.1 for every `sockets` node, as the earlier figures were taken; an address of its
/// own for each `tcp;ofi_rxm` node (127.0.0.1, 127.0.0.2, ...), which that provider needs.
fn host(provider: &str, n: u16) -> Ipv4Addr {
    if provider == "sockets" {
        Ipv4Addr::LOCALHOST
    } else {
        Ipv4Addr::new(127, 0, 0, 1 + n as u8)
    }
}

/// The first port of a block of `nodes * PORTS_PER_NODE` ports that are free now on every
/// address a node of any provider may take, chosen from the process id so that concurrent runs
/// rarely try the same block first.
pub fn free_port_block(nodes: u16) -> Result<u16, String> {
    let block = nodes * PORTS_PER_NODE;
    let blocks = (LAST_PORT - FIRST_PORT) / block;
    let first = (std::process::id() % blocks as u32) as u16;
    let free = |base: u16| {
        (0..nodes).all(|n| {
            let from = base + n * PORTS_PER_NODE;
            (from..from + PORTS_PER_NODE).all(|p| {
                ["sockets", "tcp;ofi_rxm"]
                    .iter()
                    .all(|provider| TcpListener::bind((host(provider, n), p)).is_ok())
            })
        })
    };
    for n in 0..blocks {
        let base = FIRST_PORT + ((first + n) % blocks) * block;
        if free(base) {
            return Ok(base);
        }
    }
    Err(format!("no block of {block} free ports on loopback"))
}

/// The provider a `--provider` option names (`sockets` when it names none), as the backend
/// spells it.
pub fn provider(name: Option<&str>) -> Result<&'static str, String> {
    let name = name.unwrap_or("sockets");
    PROVIDERS.iter().copied().find(|&p| p == name).ok_or_else(|| {
        format!("ofi provider {name:?} is not supported: use one of {}", PROVIDERS.join(", "))
    })
}

/// The ofi provider that the `--fabric` and `--provider` options ask for: none on shm, where
/// naming one is an error.
pub fn fabric_provider(
    fabric: &str,
    provider_name: Option<&str>,
) -> Result<Option<&'static str>, String> {
    match (fabric, provider_name) {
        ("shm", None) => Ok(None),
        ("shm", Some(p)) => Err(format!("--provider {p:?} is for --fabric ofi; shm has none")),
        ("ofi", p) => provider(p).map(Some),
        (other, _) => Err(format!("unknown fabric {other:?}: use shm or ofi")),
    }
}

/// Node `me`'s configuration, with `provider`, in a loopback cluster of `nodes` nodes whose
/// ports start at `base_port`.
pub fn loopback_config(provider: &str, base_port: u16, nodes: u16, me: u16) -> OfiConfig {
    let addrs: BTreeMap<NodeId, NodeAddr> = (0..nodes)
        .map(|n| {
            let host = host(provider, n).to_string();
            (NodeId(n), NodeAddr { host, base_port: base_port + n * PORTS_PER_NODE })
        })
        .collect();
    OfiConfig::new(provider, CLUSTER_ID, NodeId(me), addrs)
}

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
