//! The disks a test machine has, as QEMU arguments: virtio disks (the
//! machine's own, a release disk) and an install stick on USB. Each
//! drive gets a device id, so a test can pull it through the monitor
//! and choose the boot order with `bootindex`.

use std::ffi::OsString;
use std::path::Path;

/// The install stick's device id, for `device_del` on the monitor.
pub const STICK_DEVICE: &str = "stickdev";

/// A raw image on virtio (the guest's vda, vdb, ... in argument order),
/// with drive id `id` and device id `<id>dev`; first in the boot order
/// at the lowest `bootindex` given.
pub fn virtio(id: &str, image: &Path, bootindex: Option<u32>, readonly: bool) -> Vec<OsString> {
    let ro = if readonly { "readonly=on," } else { "" };
    let order = bootindex
        .map(|i| format!(",bootindex={i}"))
        .unwrap_or_default();
    vec![
        "-drive".into(),
        format!("if=none,id={id},format=raw,{ro}file={}", image.display()).into(),
        "-device".into(),
        format!("virtio-blk-pci,drive={id},id={id}dev{order}").into(),
    ]
}

/// A raw image as a USB stick on an xHCI controller (the guest's sda),
/// first in the boot order, removable with `device_del` [`STICK_DEVICE`].
pub fn usb_stick(image: &Path) -> Vec<OsString> {
    vec![
        "-device".into(),
        "qemu-xhci,id=xhci".into(),
        "-drive".into(),
        format!("if=none,id=stick,format=raw,file={}", image.display()).into(),
        "-device".into(),
        format!("usb-storage,bus=xhci.0,drive=stick,id={STICK_DEVICE},bootindex=0").into(),
    ]
}
