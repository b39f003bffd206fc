//! What identifies a CUDA device to NVML (its UUID and PCI bus id, written as NVML writes
//! them), and its compute capability. Read through the shim (`c10d::cuda_identity`).

/// What identifies a CUDA device to NVML, and its compute capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaIdentity {
    pub major: i32,
    pub minor: i32,
    pub pci_domain: i32,
    pub pci_bus: i32,
    pub pci_device: i32,
    pub uuid: [u8; 16],
}

impl CudaIdentity {
    /// The UUID as NVML writes it: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    pub fn nvml_uuid(&self) -> String {
        let h: Vec<String> = self.uuid.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "GPU-{}-{}-{}-{}-{}",
            h[0..4].concat(),
            h[4..6].concat(),
            h[6..8].concat(),
            h[8..10].concat(),
            h[10..16].concat()
        )
    }

    /// The PCI bus id as NVML writes it: `00000000:3B:00.0`.
    pub fn nvml_pci_bus_id(&self) -> String {
        format!("{:08X}:{:02X}:{:02X}.0", self.pci_domain, self.pci_bus, self.pci_device)
    }
}
