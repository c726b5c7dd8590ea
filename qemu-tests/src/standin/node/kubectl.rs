//! `k3s kubectl`, the part liken-init asks: `get node <name>` as its
//! name (`-o name`), as JSON, or through a JSONPath template, and `get
//! --raw <path>` (`/readyz`), read from the apiserver with the
//! kubeconfig given (`--kubeconfig`, else `KUBECONFIG`, else k3s's
//! /etc/rancher/k3s/k3s.yaml). The answers are the apiserver's own, the
//! real Node object, so a boot is blessed only when the Node this
//! machine reports is there (and, for the JSONPath question, Ready with
//! a fresh heartbeat). Anything else is refused on stderr with status 1.

use std::path::PathBuf;

use liken_kube::request::NODES;
use liken_kube::{Api, Client, Config, DynamicObject};

use super::jsonpath;

/// What was asked.
#[derive(Debug, PartialEq, Eq)]
pub struct Ask {
    /// The kubeconfig to use.
    pub kubeconfig: PathBuf,
    /// The question.
    pub what: What,
}

/// The question.
#[derive(Debug, PartialEq, Eq)]
pub enum What {
    /// `get node <name> -o <output>`.
    Node(String, Output),
    /// `get --raw <path>`.
    Raw(String),
}

/// The output format.
#[derive(Debug, PartialEq, Eq)]
pub enum Output {
    /// `-o name`: `node/<name>`.
    Name,
    /// `-o json`.
    Json,
    /// `-o jsonpath=<template>`.
    JsonPath(String),
}

/// Reads `kubectl ... get node <name> -o <format>` (the words after
/// `kubectl`).
pub fn parse(args: &[String], kubeconfig_env: Option<String>) -> Result<Ask, String> {
    let mut kubeconfig = kubeconfig_env
        .filter(|k| !k.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/rancher/k3s/k3s.yaml"));
    let mut words = Vec::new();
    let mut output = None;
    let mut raw = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with('-') => (f, Some(v.to_owned())),
            _ => (a.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned());
        match flag {
            "--kubeconfig" => {
                kubeconfig = PathBuf::from(value().ok_or("--kubeconfig needs a file")?)
            }
            "-o" | "--output" => output = Some(value().ok_or("-o needs a format")?),
            "--raw" => raw = Some(value().ok_or("--raw needs a path")?),
            f if f.starts_with('-') => return Err(format!("flag {f} is not answered")),
            _ => words.push(a.clone()),
        }
    }
    if let Some(path) = raw {
        return match words.as_slice() {
            [get] if get == "get" => Ok(Ask {
                kubeconfig,
                what: What::Raw(path),
            }),
            _ => Err(format!("kubectl {} --raw is not answered", words.join(" "))),
        };
    }
    let node = match words.as_slice() {
        [get, kind, name] if get == "get" && (kind == "node" || kind == "nodes") => name.clone(),
        _ => {
            return Err(format!(
                "kubectl {} is not answered (only get node <name> and get --raw <path>)",
                words.join(" ")
            ));
        }
    };
    let output = match output.as_deref() {
        Some("name") => Output::Name,
        Some("json") => Output::Json,
        Some(o) if o.starts_with("jsonpath=") => {
            Output::JsonPath(o["jsonpath=".len()..].to_owned())
        }
        other => {
            return Err(format!(
                "-o {} is not answered (name, json or jsonpath=)",
                other.unwrap_or("")
            ));
        }
    };
    Ok(Ask {
        kubeconfig,
        what: What::Node(node, output),
    })
}

/// Answers on stdout; returns the exit status.
pub fn run(args: &[String]) -> i32 {
    let answer = parse(args, std::env::var("KUBECONFIG").ok()).and_then(|ask| {
        let config = Config::from_kubeconfig(&ask.kubeconfig, None).map_err(|e| e.to_string())?;
        let client = Client::new(&config)
            .map_err(|e| e.to_string())?
            .identify("liken-standin-k3s-kubectl", env!("CARGO_PKG_VERSION"));
        match ask.what {
            What::Raw(path) => {
                let req = liken_kube::Request {
                    method: liken_kube::request::Method::Get,
                    path,
                    query: Vec::new(),
                    body: None,
                    content_type: None,
                    timeout: None,
                };
                let body = client.send(&req).map_err(|e| e.to_string())?;
                Ok(String::from_utf8_lossy(&body).into_owned())
            }
            What::Node(name, output) => {
                let node: DynamicObject = client
                    .get(&Api::all(NODES), &name)
                    .map_err(|e| e.to_string())?;
                match output {
                    Output::Name => Ok(format!("node/{}", liken_kube::Object::name(&node))),
                    Output::Json => {
                        serde_json::to_string_pretty(&node.0).map_err(|e| e.to_string())
                    }
                    Output::JsonPath(t) => jsonpath::evaluate(&t, &node.0),
                }
            }
        }
    });
    match answer {
        Ok(text) => {
            println!("{text}");
            0
        }
        Err(e) => {
            eprintln!("liken-standin-k3s: kubectl: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &[&str]) -> Vec<String> {
        s.iter().map(|w| (*w).to_owned()).collect()
    }

    #[test]
    fn reads_inits_question() {
        let ask = parse(
            &words(&[
                "--kubeconfig",
                "/var/lib/rancher/k3s/agent/kubelet.kubeconfig",
                "get",
                "node",
                "node-2",
                "-o",
                "jsonpath={.metadata.name}",
            ]),
            None,
        )
        .unwrap();
        assert_eq!(
            ask.kubeconfig,
            PathBuf::from("/var/lib/rancher/k3s/agent/kubelet.kubeconfig")
        );
        assert_eq!(
            ask.what,
            What::Node("node-2".into(), Output::JsonPath("{.metadata.name}".into()))
        );
        let ask = parse(&words(&["get", "nodes", "n", "-o=json"]), Some("/k".into())).unwrap();
        assert_eq!(
            (ask.kubeconfig, ask.what),
            (PathBuf::from("/k"), What::Node("n".into(), Output::Json))
        );
        let ask = parse(
            &words(&["--kubeconfig", "/k", "get", "node", "n", "-o", "name"]),
            None,
        )
        .unwrap();
        assert_eq!(ask.what, What::Node("n".into(), Output::Name));
        let ask = parse(
            &words(&["--kubeconfig", "/k", "get", "--raw", "/readyz"]),
            None,
        )
        .unwrap();
        assert_eq!(ask.what, What::Raw("/readyz".into()));
        assert!(parse(&words(&["get", "pods"]), None).is_err());
        assert!(parse(&words(&["get", "node", "n"]), None).is_err());
        assert!(parse(&words(&["--raw", "/readyz"]), None).is_err());
        assert!(parse(&words(&["get", "node", "n", "-o", "yaml"]), None).is_err());
    }
}
