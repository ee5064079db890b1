//! libfabric clusters on loopback for the benchmarks: which provider the options name, a block
//! of free ports, and each node's configuration.

use mu_fabric::NodeId;
use mu_fabric_ofi::{NodeAddr, OfiConfig, PORTS_PER_NODE, PROVIDERS};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, TcpListener};

const CLUSTER_ID: u64 = 0x6d75_6f66_6962;

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
