//! Lists the RDMA devices this build of mu-fabric-verbs can see, or says why there are none:
//! `cargo run -p mu-fabric-verbs --features verbs --example verbs_devices`.

fn main() {
    match mu_fabric_verbs::device_names() {
        Ok(names) => {
            for name in names {
                println!("{name}");
            }
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
