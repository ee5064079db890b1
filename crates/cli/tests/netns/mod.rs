//! Hosts for the multi-host tests: network namespaces, each joined by a veth link to a bridge in
//! one more namespace (the switch), made with `ip` (iproute2) and removed when dropped
//! (deleting a namespace deletes the links and the bridge in it). Host `i` has the address
//! `<subnet>.<i + 1>/24`. It needs root: [`Network::create`] says when the test must skip.

#![allow(dead_code)] // each test file uses its own part

use std::process::Command;

/// `ip ARGS`, which must succeed.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e} (install iproute2)", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Whether this process runs as root (its effective uid, from `/proc/self/status`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).map(|l| {
                l.split_whitespace().nth(2) == Some("0") // the effective uid
            })
        })
        .unwrap_or(false)
}

/// The namespaces and links of one run; removed when dropped.
pub struct Network {
    pub hosts: Vec<String>,
    switch: String,
    /// The switch's end of each host's link: setting it down cuts the host off.
    ports: Vec<String>,
    /// `a.b.c` of the hosts' addresses.
    subnet: String,
    /// A link from this namespace to the switch, if asked for.
    own_nic: Option<String>,
}

impl Network {
    /// `hosts` namespaces named `<prefix><pid>-<i>` on `subnet` (`"10.99.0"`), or why the test
    /// must skip (`Ok(None)`, said on stderr): no root, or a root that may not make network
    /// namespaces (a container may withhold it). `prefix` keeps the names of two tests apart.
    pub fn create(prefix: &str, hosts: usize, subnet: &str) -> Result<Option<Network>, String> {
        if !is_root() {
            eprintln!("skipped: creating network namespaces needs root");
            return Ok(None);
        }
        match Network::make(prefix, hosts, subnet) {
            Ok(net) => Ok(Some(net)),
            Err(e) if e.contains("Operation not permitted") || e.contains("Permission denied") => {
                eprintln!("skipped: this root may not create network namespaces: {e}");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn make(prefix: &str, hosts: usize, subnet: &str) -> Result<Network, String> {
        let tag = std::process::id() % 100_000;
        let net = Network {
            hosts: (0..hosts).map(|i| format!("{prefix}{tag}-{i}")).collect(),
            switch: format!("{prefix}{tag}-sw"),
            ports: (0..hosts).map(|i| format!("{prefix}{tag}s{i}")).collect(),
            subnet: subnet.to_string(),
            own_nic: None,
        };
        // Left from an earlier run with the same process id: gone before anything is made.
        for ns in net.hosts.iter().chain([&net.switch]) {
            let _ = ip(&["netns", "del", ns]);
        }
        // An early return drops `net`, which removes whatever was made.
        ip(&["netns", "add", &net.switch])?;
        ip(&["-n", &net.switch, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &net.switch, "link", "set", "br0", "up"])?;
        for i in 0..hosts {
            let (host, port) = (&net.hosts[i], &net.ports[i]);
            let nic = format!("{prefix}{tag}h{i}");
            ip(&["netns", "add", host])?;
            ip(&[
                "link",
                "add",
                port,
                "netns",
                &net.switch,
                "type",
                "veth",
                "peer",
                "name",
                &nic,
                "netns",
                host,
            ])?;
            ip(&["-n", &net.switch, "link", "set", port, "master", "br0", "up"])?;
            ip(&["-n", host, "addr", "add", &format!("{}/24", net.addr(i)), "dev", &nic])?;
            ip(&["-n", host, "link", "set", &nic, "up"])?;
            ip(&["-n", host, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    /// Host `i`'s address.
    pub fn addr(&self, i: usize) -> String {
        format!("{}.{}", self.subnet, i + 1)
    }

    /// A link from this process's namespace to the switch, with the address `<subnet>.<last>`
    /// (the test then reaches the hosts as another host would).
    pub fn join_switch(&mut self, last: u8) -> Result<(), String> {
        let nic = format!("{}c", self.switch.trim_end_matches("-sw"));
        let _ = ip(&["link", "del", &nic]);
        let switch_end = format!("{nic}s");
        ip(&[
            "link",
            "add",
            &nic,
            "type",
            "veth",
            "peer",
            "name",
            &switch_end,
            "netns",
            &self.switch,
        ])?;
        self.own_nic = Some(nic.clone());
        ip(&["-n", &self.switch, "link", "set", &switch_end, "master", "br0", "up"])?;
        ip(&["addr", "add", &format!("{}.{last}/24", self.subnet), "dev", &nic])?;
        ip(&["link", "set", &nic, "up"])
    }

    /// Cuts host `i` off: its link goes down at the switch, and nothing it sends arrives.
    pub fn cut(&self, i: usize) -> Result<(), String> {
        ip(&["-n", &self.switch, "link", "set", &self.ports[i], "down"])
    }

    /// Cuts the link between hosts `a` and `b` only: each drops what it would send the other
    /// (a blackhole route), and both still reach every other host.
    pub fn cut_between(&self, a: usize, b: usize) -> Result<(), String> {
        for (from, to) in [(a, b), (b, a)] {
            let to = format!("{}/32", self.addr(to));
            ip(&["-n", &self.hosts[from], "route", "add", "blackhole", &to])?;
        }
        Ok(())
    }

    /// A command that runs `program` in host `i`'s namespace (`ip netns exec`, which execs it:
    /// the child's process is the program's).
    pub fn command(&self, i: usize, program: &str) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.hosts[i], program]);
        command
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Deleting the switch's namespace deletes this namespace's link too (one end of a
        // pair takes the other); deleted here as well in case the namespace never existed.
        if let Some(nic) = &self.own_nic {
            let _ = ip(&["link", "del", nic]);
        }
        for ns in self.hosts.iter().chain([&self.switch]) {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}
