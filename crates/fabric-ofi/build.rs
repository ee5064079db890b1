//! Compiles the C shim over libfabric (its data-path calls are inline functions in its headers)
//! and links libfabric. Needs the `libfabric-dev` package: `scripts/install-fabric-deps.sh`.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=csrc/shim.c");
    let header = Path::new("/usr/include/rdma/fabric.h");
    let include = std::env::var("LIBFABRIC_INCLUDE").ok();
    if include.is_none() && !header.exists() {
        println!(
            "cargo:warning=libfabric headers not found (/usr/include/rdma/fabric.h): install \
             libfabric-dev (scripts/install-fabric-deps.sh) or set LIBFABRIC_INCLUDE"
        );
    }
    let mut build = cc::Build::new();
    build.file("csrc/shim.c").flag_if_supported("-Wall").flag_if_supported("-Wextra");
    if let Some(dir) = &include {
        build.include(dir);
    }
    build.compile("mu_ofi_shim");
    if let Ok(dir) = std::env::var("LIBFABRIC_LIB") {
        println!("cargo:rustc-link-search=native={dir}");
    }
    println!("cargo:rustc-link-lib=fabric");
}
