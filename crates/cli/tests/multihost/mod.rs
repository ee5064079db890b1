//! Three replicas on three hosts, shared by the multi-host tests of each ofi provider (each its
//! own test binary, so its own process: two such clusters one after the other in one process
//! came up unstable on a 2-vCPU machine). A key-value cluster on the libfabric fabric
//! (`fabric = "ofi"`) whose replicas run in three network namespaces, each joined by a veth
//! link to a bridge in a fourth namespace (the switch). The test creates all of it and removes
//! it. Under a steady stream of writes, the leader's link is cut at the switch (its process
//! lives on, unreachable), then the leader is killed behind the cut. No acknowledged write may
//! be lost, the survivors must end equal, and the time from the cut to the first write the new
//! leader acknowledges is printed. The hosts' kernel settings are left as they are: the backend
//! itself limits how long its streams' data may go unacknowledged (docs/fabric.md).
//!
//! It needs root (network namespaces) and iproute2 (`scripts/install-fabric-deps.sh` installs
//! it). The test's clients reach the replicas over TCP (`[clients]`) through a link of their own
//! to the switch, so cutting the leader's link cuts it off from them too.

use crate::common::Setup;
use crate::netns::Network;
use mu_service::{Client, ClientError, ClusterConfig};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// The replicas' hosts: 10.99.0.1, .2, .3 on the switch's bridge.
const REPLICAS: u16 = 3;
const SUBNET: &str = "10.99.0";
const BASE_PORT: u16 = 31_000;
/// Where each replica accepts clients over TCP (`[clients]`).
const CLIENT_PORT: u16 = 31_100;
/// The test's own address on the switch (10.99.0.254): its clients reach the replicas as
/// another host's would.
const CLIENT_LAST: u8 = 254;

/// Runs `mu replica` for replica `i` in its host's namespace, its output in `log`.
fn start_replica(net: &Network, i: usize, config: &str, log: &Path) -> Child {
    let out = std::fs::File::create(log).expect("replica log");
    net.command(i, env!("CARGO_BIN_EXE_mu"))
        .arg("replica")
        .args(["--config", config, "--id", &i.to_string()])
        .env_remove("MU_LOG")
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log handle"))
        .stderr(out)
        .spawn()
        .expect("ip netns exec runs")
}

/// The replicas' processes: killed and reaped when dropped.
struct Replicas(Vec<Option<Child>>);

impl Replicas {
    fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.0[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for i in 0..self.0.len() {
            self.kill(i);
        }
    }
}

/// Every live replica's report, as `mu cluster status` reads them.
fn reports(config: &ClusterConfig, ids: &[u16]) -> Vec<Result<mu_service::ReplicaReport, String>> {
    let mut client = Client::new(config.cluster_id, config.endpoints()).expect("a client");
    ids.iter().map(|&id| client.status(id)).collect()
}

/// The whole story on `provider`, for cluster `cluster_id`.
pub fn three_hosts(provider: &str, cluster_id: u64) {
    let mut net = match Network::create("mu", REPLICAS as usize, SUBNET) {
        Ok(Some(net)) => net,
        Ok(None) => return, // no root: said why
        Err(e) => panic!("the test network: {e}"),
    };
    net.join_switch(CLIENT_LAST).expect("the test's link to the switch");
    run(net, provider, cluster_id);
}

fn run(net: Network, provider: &str, cluster_id: u64) {
    let setup = Setup::new(&format!("multihost-{cluster_id:x}"), cluster_id);
    let text = format!(
        "cluster_id = {}\nfabric = \"ofi\"\nrun_dir = \"{}\"\nreplicas = [0, 1, 2]\n\n\
         [log]\nslots = 1024\nslot_bytes = 1024\n\n\
         [detector]\nread_period_us = 20000\n\n\
         [ofi]\nprovider = \"{provider}\"\n[ofi.addresses]\n\
         0 = \"10.99.0.1:{BASE_PORT}\"\n1 = \"10.99.0.2:{BASE_PORT}\"\n2 = \"10.99.0.3:{BASE_PORT}\"\n\
         [clients.addresses]\n\
         0 = \"10.99.0.1:{CLIENT_PORT}\"\n1 = \"10.99.0.2:{CLIENT_PORT}\"\n2 = \"10.99.0.3:{CLIENT_PORT}\"\n",
        cluster_id,
        setup.run_dir.display(),
    );
    std::fs::write(&setup.config, text).expect("config file");
    let config = ClusterConfig::load(&setup.config).expect("the configuration loads");
    config.prepare_run_dir().expect("the run directory");
    let ids: Vec<u16> = (0..REPLICAS).collect();
    let mut replicas = Replicas(
        (0..REPLICAS as usize)
            .map(|i| Some(start_replica(&net, i, setup.config(), &config.log_path(i as u16))))
            .collect(),
    );

    // Up: every replica answers and all agree on a leader.
    let start = Instant::now();
    let leader = loop {
        let now = reports(&config, &ids);
        let leaders: Vec<Option<u16>> =
            now.iter().map(|r| r.as_ref().ok().and_then(|r| r.leader)).collect();
        if leaders.iter().all(|l| l.is_some() && *l == leaders[0]) {
            break leaders[0].expect("a leader") as usize;
        }
        for (i, child) in replicas.0.iter_mut().enumerate() {
            if let Some(status) = child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("replica {i} exited ({status}): {}", setup.log(i as u16));
            }
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no agreed leader: {now:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("three hosts up, replica {leader} leads, after {:?}", start.elapsed());

    let mut client = Client::new(config.cluster_id, config.endpoints()).expect("a client");
    // Every write but those during the cut must succeed: it may take long on a loaded machine.
    // During the cut a write may time out (its fate unknown), so there it gets 2 s, and the
    // loop asks again.
    const PATIENT: Duration = Duration::from_secs(30);
    client.set_timeout(PATIENT);
    let mut acked: Vec<(String, String)> = Vec::new();
    let mut put = |client: &mut Client, key: String| -> Result<(), ClientError> {
        let value = format!("v-{key}");
        client.put(key.as_bytes(), value.as_bytes())?;
        acked.push((key, value));
        Ok(())
    };
    for n in 0..20 {
        put(&mut client, format!("before-{n}")).expect("a write before the cut");
    }

    // Cut the leader off, and keep writing until a write is acknowledged again: the cut-off
    // leader cannot reach a majority, so that write was committed by a new leader.
    net.cut(leader).expect("cutting the leader's link");
    let cut = Instant::now();
    client.set_timeout(Duration::from_secs(2));
    let mut unknown = 0;
    let mut n = 0;
    let failover = loop {
        n += 1;
        match put(&mut client, format!("during-{n}")) {
            Ok(()) => break cut.elapsed(),
            Err(ClientError::Timeout { .. }) => unknown += 1,
            Err(e) => panic!("a write during the cut: {e}"),
        }
        assert!(
            cut.elapsed() < Duration::from_secs(90),
            "no write acknowledged within 90 s of the cut; logs:\n{}\n{}\n{}",
            setup.log(0),
            setup.log(1),
            setup.log(2)
        );
    };
    eprintln!(
        "{provider} failover: the first write after cutting leader {leader} off was \
         acknowledged {failover:?} after the cut ({unknown} writes timed out before it)"
    );
    client.set_timeout(PATIENT);
    if failover > Duration::from_secs(20) {
        for i in 0..REPLICAS {
            eprintln!("--- replica {i}'s log (a slow failover) ---\n{}", setup.log(i));
        }
    }
    for n in 0..20 {
        put(&mut client, format!("cut-{n}")).expect("a write with the leader cut off");
    }

    // Kill it behind the cut: nothing of its death reaches the others.
    replicas.kill(leader);
    for n in 0..20 {
        put(&mut client, format!("killed-{n}")).expect("a write after the kill");
    }

    // Every acknowledged write is there.
    for (key, value) in &acked {
        let got = client.get(key.as_bytes()).expect("a read");
        assert_eq!(got.as_deref(), Some(value.as_bytes()), "acknowledged write {key} lost");
    }

    // The survivors apply the same entries and follow a leader among them.
    let survivors: Vec<u16> = ids.iter().copied().filter(|&i| i as usize != leader).collect();
    let start = Instant::now();
    loop {
        let now = reports(&config, &survivors);
        let ok: Vec<&mu_service::ReplicaReport> = now.iter().flatten().collect();
        // Both survivors stop naming the dead leader once their detectors find it failed,
        // which on this fabric may be a little after they agree on the log: waited for too.
        if ok.len() == survivors.len()
            && ok[0].applied == ok[1].applied
            && ok[0].digest == ok[1].digest
            && ok.iter().all(|r| r.leader != Some(leader as u16))
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "survivors differ, or one still names the dead leader {leader}: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("{} acknowledged writes read back; survivors {survivors:?} equal", acked.len());
    drop(replicas);
    drop(net);
}
