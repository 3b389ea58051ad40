//! Fuzzes `PcapReader` and the packet parsers behind it, as `softib pcap check` uses them: no
//! panic; reading ends (at most one item per 16-byte record header, nothing after an error);
//! records stay within the snapshot length; writing the records back with `PcapWriter` and
//! reading them again gives the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_wire::native::NativePacket;
use softib_wire::pcap::{
    PcapReader, PcapWriter, GLOBAL_HEADER_LEN, LINKTYPE_ETHERNET, LINKTYPE_USER0, MAX_SNAPLEN,
    RECORD_HEADER_LEN,
};
use softib_wire::roce::{classify, FrameClass, RocePacket};

fuzz_target!(|data: &[u8]| {
    let Ok(reader) = PcapReader::new(data) else {
        return;
    };
    let link_type = reader.link_type();
    let most = data.len().saturating_sub(GLOBAL_HEADER_LEN) / RECORD_HEADER_LEN + 1;

    let mut items = 0usize;
    let mut frames: Vec<&[u8]> = Vec::new();
    let mut failed = false;
    for rec in reader.records().take(most + 1) {
        items += 1;
        assert!(!failed, "PcapReader yielded an item after an error");
        match rec {
            Ok(r) => {
                assert!(r.data.len() <= MAX_SNAPLEN as usize);
                let _ = r.timestamp_ns();
                match link_type {
                    LINKTYPE_ETHERNET if classify(r.data) == FrameClass::RoceV2 => {
                        if let Ok(p) = RocePacket::parse(r.data) {
                            let _ = p.icrc_ok();
                        }
                    }
                    LINKTYPE_USER0 => {
                        if let Ok(p) = NativePacket::parse(r.data) {
                            let _ = (p.icrc_ok(), p.vcrc_ok());
                        }
                    }
                    _ => {}
                }
                frames.push(r.data);
            }
            Err(_) => failed = true,
        }
    }
    assert!(
        items <= most,
        "PcapReader yielded {items} items from {} bytes",
        data.len()
    );

    // Write the records that were read, read them back: same bytes, same count, no error.
    let mut w = PcapWriter::new(Vec::new(), link_type).expect("write to a Vec");
    for (i, f) in frames.iter().enumerate() {
        w.write_record(i as u64 * 1_000, f).expect("write to a Vec");
    }
    let out = w.into_inner();
    let again = PcapReader::new(&out).expect("re-read of a written pcap");
    assert_eq!(again.link_type(), link_type);
    let back: Vec<&[u8]> = again
        .records()
        .map(|r| r.expect("record of a written pcap").data)
        .collect();
    assert_eq!(back, frames);
});
