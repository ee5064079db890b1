//! `mu bench fabric`: the JSON object has every figure the docs promise, and bad input is a clear
//! error with a non-zero exit.

use std::process::Command;

fn mu() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mu"))
}

/// Runs `mu ARGS`, which must fail with `why` in its error output.
fn refused(args: &[&str], why: &str) {
    let out = mu().args(args).output().unwrap();
    assert!(!out.status.success(), "mu {args:?} succeeded");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(why), "expected {why:?} in: {err}");
}

#[test]
fn json_has_every_figure() {
    let out = mu()
        .args(["bench", "fabric", "--samples", "3000", "--perm-samples", "200"])
        .args(["--crash-samples", "5", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    for key in ["write_rtt_ns", "read_rtt_ns", "cas_rtt_ns", "write2_rtt_ns", "bare_pingpong_ns"] {
        for q in ["p50", "p99", "p999"] {
            let x = v[key][q].as_u64().unwrap_or_else(|| panic!("{key}.{q} missing in {v}"));
            assert!(x > 0, "{key}.{q} = 0");
        }
        assert!(v[key]["samples"].as_u64().unwrap() >= 3000, "{key}: too few samples");
    }
    for key in ["perm_fast_ns", "perm_slow_ns"] {
        assert!(v[key]["p50"].as_u64().unwrap() > 0, "{key}.p50 missing in {v}");
    }
    // Five peers killed: each reported dead, and each reported no later than it was reaped.
    for key in ["crash_notice_ns", "crash_reaped_ns"] {
        assert_eq!(v[key]["samples"].as_u64(), Some(5), "{key} in {v}");
    }
    let notice = v["crash_notice_ns"]["p50"].as_u64().unwrap();
    assert!(notice > 0 && notice <= v["crash_reaped_ns"]["p50"].as_u64().unwrap(), "{v}");
    assert!(v["write_over_bare_p50"].as_f64().unwrap() > 0.0);
}

#[test]
fn zero_samples_is_a_clear_error() {
    refused(&["bench", "fabric", "--samples", "0"], "--samples");
    refused(&["bench", "fabric", "--crash-samples", "0"], "--crash-samples");
}

#[test]
fn run_directory_of_another_cluster_is_refused() {
    let dir = std::env::temp_dir().join(format!("mu-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(dir.join("cluster"), "mu-shm cluster 0x1 layout 1\n").unwrap();
    let out =
        mu().args(["bench", "fabric", "--samples", "10", "--run-dir"]).arg(&dir).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("belongs to cluster 0x1, not to cluster"), "{err}");
}

/// `--fabric ofi` on each provider: the JSON names the provider and has every round trip.
#[test]
fn ofi_json_names_its_provider() {
    for provider in ["sockets", "tcp;ofi_rxm"] {
        let out = mu()
            .args(["bench", "fabric", "--fabric", "ofi", "--provider", provider])
            .args(["--samples", "300", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{provider}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
        assert_eq!(v["provider"].as_str(), Some(provider), "{v}");
        for key in ["write_rtt_ns", "read_rtt_ns", "cas_rtt_ns", "write2_rtt_ns"] {
            assert!(v[key]["p50"].as_u64().is_some_and(|x| x > 0), "{provider}: {key} in {v}");
        }
    }
}

#[test]
fn a_provider_needs_the_ofi_fabric_and_a_known_name() {
    refused(&["bench", "fabric", "--provider", "sockets"], "is for --fabric ofi");
    let unknown = ["bench", "fabric", "--fabric", "ofi", "--provider", "verbs"];
    refused(&unknown, "not supported: use one of sockets, tcp;ofi_rxm");
}
