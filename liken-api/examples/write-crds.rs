//! Writes the generated CRDs into a directory (`make crds` passes
//! `images/manifests/crds`). Each file is written to a temporary name and
//! renamed, so an interrupted run never leaves half a CRD in the tree.

use std::io::Write;
use std::path::PathBuf;
use std::{env, fs, process};

fn main() {
    let Some(dir) = env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: write-crds <directory>");
        process::exit(2);
    };
    if let Err(e) = fs::create_dir_all(&dir) {
        eprintln!("write-crds: creating {}: {e}", dir.display());
        process::exit(1);
    }
    for (name, crd) in liken_api::crd::all() {
        let path = dir.join(name);
        let tmp = dir.join(format!(".{name}.tmp"));
        let written = fs::File::create(&tmp).and_then(|mut f| {
            f.write_all(liken_api::crd::render(&crd).as_bytes())?;
            f.sync_all()
        });
        if let Err(e) = written.and_then(|()| fs::rename(&tmp, &path)) {
            eprintln!("write-crds: writing {}: {e}", path.display());
            process::exit(1);
        }
        println!("wrote {}", path.display());
    }
}
