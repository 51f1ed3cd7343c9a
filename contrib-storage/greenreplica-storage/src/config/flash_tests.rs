//! `[[flash]]` pools and a volume's `flash` key: hostile input gets an error naming the key.

use super::*;

/// Two QMD volumes (one pair each, 64 MiB members) on pool "fast" (24 MiB: 8 MiB of data
/// after the header slots), with `pool` lines appended to the `[[flash]]` table.
fn two_on_a_pool(pool: &str) -> String {
    let mut text = String::from("[agent]\nsocket = \"/run/grs/control.sock\"\n");
    for v in ["a", "b"] {
        text.push_str(&format!(
            "[[volume]]\nname = \"{v}\"\nlayout = \"qmd\"\nflash = \"fast\"\n\
             [volume.export]\nmount_point = \"/srv/{v}\"\n"
        ));
        for m in 0..2 {
            text.push_str(&format!(
                "[[volume.member]]\nkind = \"file\"\npath = \"/var/lib/grs/{v}-{m}.img\"\n\
                 size = \"64MiB\"\nprofile = \"test-fast\"\n"
            ));
        }
    }
    text.push_str(&format!(
        "[[flash]]\nname = \"fast\"\nkind = \"file\"\npath = \"/var/lib/grs/flash.img\"\n\
         size = \"24MiB\"\n{pool}\n"
    ));
    text
}

fn err(text: &str) -> String {
    Config::parse(text, "test.toml").unwrap_err().to_string()
}

#[test]
fn two_qmd_volumes_share_a_pool() {
    let c = Config::parse(&two_on_a_pool(""), "test.toml").unwrap();
    assert_eq!(c.flash.len(), 1);
    assert_eq!(c.volumes[1].flash.as_deref(), Some("fast"));
    assert_eq!(c.flash[0].profile, "ssd");
    assert_eq!(c.flash[0].shape().unwrap(), Some((8 << 20, 1 << 20)));
    let c = Config::parse(&two_on_a_pool("extent_size = \"2MiB\""), "t").unwrap();
    assert_eq!(c.flash[0].shape().unwrap(), Some((8 << 20, 2 << 20)));
}

#[test]
fn hostile_pools_and_references_are_refused_at_load() {
    let base = two_on_a_pool("");
    let cases = [
        // A volume naming a pool that does not exist.
        (base.replacen("flash = \"fast\"", "flash = \"slow\"", 1), "volume[0].flash", "no [[flash]] pool"),
        // Pool names: invalid, duplicate.
        (base.replace("name = \"fast\"", "name = \"../x\""), "flash[0].name", "unique name"),
        (
            format!("{base}[[flash]]\nname = \"fast\"\nkind = \"file\"\npath = \"/var/lib/grs/f2.img\"\nsize = \"24MiB\"\n"),
            "flash[1].name",
            "unique name",
        ),
        // Overlapping pools: one path for two pools, or a pool over a member.
        (
            format!("{base}[[flash]]\nname = \"other\"\nkind = \"file\"\npath = \"/var/lib/grs/flash.img\"\nsize = \"24MiB\"\n"),
            "flash[1].path",
            "used by another",
        ),
        (base.replace("/var/lib/grs/a-0.img", "/var/lib/grs/flash.img"), "volume[0].member[0].path", "used by another"),
        // Sizes.
        (base.replace("size = \"24MiB\"", "size = \"16MiB\""), "flash[0].size", "leave nothing"),
        (base.replace("size = \"24MiB\"", "size = \"17MiB\""), "flash[0].size", "no extent"),
        (two_on_a_pool("extent_size = 1000"), "flash[0].size", "multiple of 4096"),
        (two_on_a_pool("extent_size = \"1TiB\""), "flash[0].size", "no extent"),
        (base.replace("size = \"24MiB\"", "size = \"99 parsecs\""), "flash[0].size", "parsecs"),
        (base.replace("size = \"24MiB\"", "size = \"64GiB\""), "volume[0].flash", "exceed the members"),
        (base.replace("size = \"24MiB\"\n", ""), "flash[0].size", "required"),
        (base.replace("kind = \"file\"\npath = \"/var/lib/grs/flash.img\"", "kind = \"emulated-hdd\"\npath = \"/var/lib/grs/flash.img\""), "flash[0].kind", "file or a blockdev"),
        (base.replace("path = \"/var/lib/grs/flash.img\"", "path = \"flash.img\""), "flash[0].path", "absolute"),
        (two_on_a_pool("profile = \"no-such\""), "flash[0].profile", "unknown drive profile"),
        // Only QMD buffers in flash; the pool sets the buffer's shape.
        (base.replacen("layout = \"qmd\"\nflash", "layout = \"raid10\"\nflash", 1), "volume[0]", "flash"),
        (
            base.replacen("[volume.export]", "[volume.layout_options]\nbuffer_bytes = 4194304\n[volume.export]", 1),
            "volume[0].layout_options.buffer_bytes",
            "flash pool fast",
        ),
        (two_on_a_pool("extent_size = \"96KiB\""), "volume[0].flash", "whole stripe units"),
    ];
    for (text, key, problem) in cases {
        let e = err(&text);
        assert!(
            e.contains(key) && e.contains(problem),
            "want {key}: {problem}, got {e}"
        );
    }
    // A QMD volume with its own flash member and no pool still loads (unchanged).
    let own = base
        .replacen("flash = \"fast\"\n", "", 1)
        .replacen(
            "[[volume.member]]\nkind = \"file\"\npath = \"/var/lib/grs/a-1.img\"\nsize = \"64MiB\"\nprofile = \"test-fast\"\n",
            "[[volume.member]]\nkind = \"file\"\npath = \"/var/lib/grs/a-1.img\"\nsize = \"64MiB\"\nprofile = \"test-fast\"\n[[volume.member]]\nkind = \"file\"\npath = \"/var/lib/grs/a-2.img\"\nsize = \"64MiB\"\nprofile = \"ssd\"\n",
            1,
        );
    Config::parse(&own, "test.toml").unwrap();
}
