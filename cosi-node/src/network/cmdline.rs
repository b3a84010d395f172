//! The kernel-command-line layer: `ip=` arguments, as the Linux kernel reads them
//! (`ip=<client-ip>:<server-ip>:<gw-ip>:<netmask>:<hostname>:<device>:<autoconf>:<dns0>:<dns1>:<ntp0>`,
//! IPv6 addresses in brackets), turned into addresses on links.
//!
//! The daemon is given the string at start; [`Cmdline::parse`] refuses a malformed one whole,
//! naming the argument and the field, so a typo never brings up half of what was meant.
//! Arguments other than `ip=` are ignored (it is a whole kernel command line), and so is an
//! `ip=` with only an autoconfiguration method (`ip=dhcp`): it states no static address. The
//! line is cut into parameters by the kernel's own rules (double quotes, `--`), so text that
//! the kernel reads as part of another parameter's quoted value states no address here either.

use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;

use crate::network::validate_link_name;

/// The kernel's limit on the command line (`COMMAND_LINE_SIZE` on x86-64).
pub const MAX_CMDLINE: usize = 4096;

/// The autoconfiguration methods the kernel knows.
const AUTOCONF: [&str; 11] = [
    "off", "none", "on", "any", "dhcp", "bootp", "rarp", "both", "dhcp6", "auto6", "",
];

/// One static address stated by an `ip=` argument.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct CmdlineAddress {
    /// The device it goes on.
    pub link: String,
    /// The address with its prefix length (the netmask, or a host prefix without one).
    pub address: IpNet,
}

/// The addresses a command line states, in the order of its `ip=` arguments.
///
/// ```
/// use cosi_node::network::Cmdline;
/// let cmdline = Cmdline::parse("console=ttyS0 ip=192.0.2.5::192.0.2.1:255.255.255.0:node-1:eth0:off").unwrap();
/// assert_eq!(cmdline.addresses[0].link, "eth0");
/// assert_eq!(cmdline.addresses[0].address.to_string(), "192.0.2.5/24");
///
/// let err = Cmdline::parse("ip=192.0.2.5::::node-1:eth0/1:off").unwrap_err();
/// assert_eq!(err.to_string(), "kernel command line: ip= argument 1: device: a link name must not contain '/'");
/// ```
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct Cmdline {
    /// The static addresses.
    pub addresses: Vec<CmdlineAddress>,
}

/// A malformed command line: which `ip=` argument (1-based), which field, and what is wrong.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
#[error("kernel command line: {}{field}: {message}", argument.map(|a| format!("ip= argument {a}: ")).unwrap_or_default())]
pub struct CmdlineError {
    /// The 1-based position among the `ip=` arguments; `None` for the line as a whole.
    pub argument: Option<usize>,
    /// The field: `client-ip`, `netmask`, `device`, ...
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

const FIELDS: [&str; 10] = [
    "client-ip",
    "server-ip",
    "gw-ip",
    "netmask",
    "hostname",
    "device",
    "autoconf",
    "dns0-ip",
    "dns1-ip",
    "ntp0-ip",
];

impl Cmdline {
    /// Parses a kernel command line. See the module docs.
    pub fn parse(line: &str) -> Result<Self, CmdlineError> {
        if line.len() > MAX_CMDLINE {
            return Err(CmdlineError {
                argument: None,
                field: "length",
                message: format!("{} bytes, at most {MAX_CMDLINE}", line.len()),
            });
        }
        let mut addresses = Vec::new();
        let arguments = parameters(line)
            .into_iter()
            .filter_map(|(name, value)| (name == "ip").then_some(value).flatten());
        for (index, value) in arguments.enumerate() {
            if let Some(address) =
                parse_argument(value).map_err(|(field, message)| CmdlineError {
                    argument: Some(index + 1),
                    field,
                    message,
                })?
            {
                addresses.push(address);
            }
        }
        Ok(Cmdline { addresses })
    }
}

type FieldError = (&'static str, String);

/// The kernel's `isspace` on the ASCII range (it also counts `\v`, which Rust's
/// `is_ascii_whitespace` does not). Bytes above it are never split on: they may be inside a
/// UTF-8 character.
fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The parameters of a command line as the kernel's `next_arg` and `parse_args` read them:
/// `name` or `name=value`, split on whitespace outside double quotes; a quote opening the
/// word or the value is dropped with the quote that ends the word; `--` ends the kernel's
/// parameters (what follows is init's).
fn parameters(line: &str) -> Vec<(&str, Option<&str>)> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        while at < bytes.len() && is_space(bytes[at]) {
            at += 1;
        }
        if at == bytes.len() {
            return out;
        }
        let quoted = bytes[at] == b'"';
        let start = at + usize::from(quoted);
        let mut in_quote = quoted;
        let mut equals = None;
        let mut end = start;
        while end < bytes.len() && (in_quote || !is_space(bytes[end])) {
            if equals.is_none() && bytes[end] == b'=' {
                equals = Some(end);
            }
            if bytes[end] == b'"' {
                in_quote = !in_quote;
            }
            end += 1;
        }
        at = end;
        // The word ends with the quote that closes what a quote opened.
        let closes = |from: usize| {
            if end > from && bytes[end - 1] == b'"' {
                end - 1
            } else {
                end
            }
        };
        // Every index is at an ASCII byte (a quote, '=', a space) or an end: a char boundary.
        let parameter = match equals {
            None => {
                let name_end = if quoted { closes(start) } else { end };
                (&line[start..name_end], None)
            }
            Some(equals) => {
                let value_quoted = bytes.get(equals + 1) == Some(&b'"') && equals + 1 < end;
                let value_start = equals + 1 + usize::from(value_quoted);
                let value_end = if quoted || value_quoted {
                    closes(value_start)
                } else {
                    end
                };
                (&line[start..equals], Some(&line[value_start..value_end]))
            }
        };
        if parameter == ("--", None) {
            return out;
        }
        out.push(parameter);
    }
}

fn parse_argument(value: &str) -> Result<Option<CmdlineAddress>, FieldError> {
    let fields = split_fields(value)?;
    if fields.len() == 1 {
        // `ip=dhcp` and friends: a method, no address.
        if AUTOCONF.contains(&fields[0]) {
            return Ok(None);
        }
    }
    if fields.len() > FIELDS.len() {
        return Err((
            "autoconf",
            format!(
                "{} fields, at most {} (client-ip:server-ip:gw-ip:netmask:hostname:device:autoconf:dns0-ip:dns1-ip:ntp0-ip)",
                fields.len(),
                FIELDS.len()
            ),
        ));
    }
    let field = |i: usize| fields.get(i).copied().unwrap_or("");
    for (i, name) in FIELDS.iter().enumerate() {
        if matches!(
            *name,
            "server-ip" | "gw-ip" | "dns0-ip" | "dns1-ip" | "ntp0-ip"
        ) && !field(i).is_empty()
        {
            parse_ip(field(i)).map_err(|m| (*name, m))?;
        }
    }
    let autoconf = field(6);
    if !AUTOCONF.contains(&autoconf) {
        return Err((
            "autoconf",
            format!("unknown method {autoconf:?}: expected off, none, on, any, dhcp, bootp, rarp, both, dhcp6 or auto6"),
        ));
    }
    if field(0).is_empty() {
        // A dynamic configuration (`ip=::::node:eth0:dhcp`): no static address.
        return Ok(None);
    }
    let client = parse_ip(field(0)).map_err(|m| ("client-ip", m))?;
    let prefix = parse_netmask(field(3), &client).map_err(|m| ("netmask", m))?;
    let link = field(5);
    if link.is_empty() {
        return Err((
            "device",
            "a static address needs the device it goes on".to_string(),
        ));
    }
    validate_link_name(link).map_err(|e| ("device", e.to_string()))?;
    let address = IpNet::new(client, prefix).map_err(|e| ("netmask", e.to_string()))?;
    Ok(Some(CmdlineAddress {
        link: link.to_string(),
        address,
    }))
}

/// Splits on `:` outside brackets (IPv6 addresses are written `[2001:db8::1]`).
fn split_fields(value: &str) -> Result<Vec<&str>, FieldError> {
    let mut fields = Vec::new();
    let mut start = 0;
    let mut bracket = false;
    for (i, c) in value.char_indices() {
        match c {
            '[' if !bracket => bracket = true,
            ']' if bracket => bracket = false,
            ':' if !bracket => {
                fields.push(&value[start..i]);
                start = i + 1;
                if fields.len() > FIELDS.len() {
                    break;
                }
            }
            _ => {}
        }
    }
    if bracket {
        let name = FIELDS.get(fields.len()).copied().unwrap_or("autoconf");
        return Err((name, "an opening '[' has no closing ']'".to_string()));
    }
    if fields.len() <= FIELDS.len() {
        fields.push(&value[start..]);
    } else {
        fields.push("");
    }
    Ok(fields)
}

fn parse_ip(text: &str) -> Result<IpAddr, String> {
    if let Some(inner) = text.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| format!("{text:?} has text after ']'"))?;
        return inner
            .parse::<std::net::Ipv6Addr>()
            .map(IpAddr::V6)
            .map_err(|_| format!("{inner:?} is not an IPv6 address"));
    }
    text.parse::<Ipv4Addr>()
        .map(IpAddr::V4)
        .map_err(|_| format!("{text:?} is not an IPv4 address (write IPv6 in brackets)"))
}

fn parse_netmask(text: &str, client: &IpAddr) -> Result<u8, String> {
    let max = match client {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    };
    if text.is_empty() {
        return Ok(max);
    }
    if let Ok(length) = text.parse::<u8>() {
        if length > max {
            return Err(format!("prefix length {length} is longer than {max}"));
        }
        return Ok(length);
    }
    if client.is_ipv6() {
        return Err(format!("{text:?} is not a prefix length (0 to 128)"));
    }
    let mask: Ipv4Addr = text
        .parse()
        .map_err(|_| format!("{text:?} is neither a dotted netmask nor a prefix length"))?;
    let bits = u32::from(mask);
    let length = bits.leading_ones();
    if bits.checked_shl(length).unwrap_or(0) != 0 {
        return Err(format!("{text} is not a contiguous netmask"));
    }
    Ok(length as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn one(line: &str) -> CmdlineAddress {
        let mut cmdline = Cmdline::parse(line).unwrap();
        assert_eq!(cmdline.addresses.len(), 1, "{line}");
        cmdline.addresses.remove(0)
    }

    #[test]
    fn a_dotted_netmask_becomes_the_prefix_length() {
        let address = one("ip=198.51.100.7::198.51.100.1:255.255.254.0::eth1:none");
        assert_eq!(address.address.to_string(), "198.51.100.7/23");
        assert_eq!(address.link, "eth1");
    }

    #[test]
    fn a_missing_netmask_means_a_host_prefix() {
        assert_eq!(
            one("ip=192.0.2.9:::::eth0").address.to_string(),
            "192.0.2.9/32"
        );
        assert_eq!(
            one("ip=[2001:db8::9]:::::eth0").address.to_string(),
            "2001:db8::9/128"
        );
    }

    #[test]
    fn ipv6_addresses_are_written_in_brackets_with_a_prefix_length() {
        let address = one("ip=[2001:db8::5]::[2001:db8::1]:64:node:eth0:off");
        assert_eq!(address.address.to_string(), "2001:db8::5/64");
    }

    #[test]
    fn an_autoconf_method_alone_states_no_address() {
        assert_eq!(Cmdline::parse("ip=dhcp quiet").unwrap(), Cmdline::default());
        assert_eq!(
            Cmdline::parse("ip=::::node:eth0:dhcp").unwrap(),
            Cmdline::default()
        );
    }

    #[test]
    fn several_arguments_keep_their_order() {
        let cmdline =
            Cmdline::parse("ip=192.0.2.1:::24::eth0 root=/dev/sda ip=192.0.2.2:::24::eth1")
                .unwrap();
        let links: Vec<_> = cmdline.addresses.iter().map(|a| a.link.as_str()).collect();
        assert_eq!(links, ["eth0", "eth1"]);
    }

    #[test]
    fn a_non_contiguous_netmask_is_refused_naming_the_field() {
        let err = Cmdline::parse("ip=192.0.2.1:::255.0.255.0::eth0").unwrap_err();
        assert_eq!(err.argument, Some(1));
        assert_eq!(err.field, "netmask");
        assert!(err.message.contains("contiguous"), "{err}");
    }

    #[test]
    fn a_static_address_without_a_device_is_refused() {
        let err = Cmdline::parse("ip=192.0.2.1:::24:node").unwrap_err();
        assert_eq!(err.field, "device");
    }

    #[test]
    fn the_second_bad_argument_is_named_as_such() {
        let err = Cmdline::parse("ip=192.0.2.1:::24::eth0 ip=192.0.2.300:::24::eth1").unwrap_err();
        assert_eq!(err.argument, Some(2));
        assert_eq!(err.field, "client-ip");
    }

    #[test]
    fn an_unknown_autoconf_method_is_refused() {
        let err = Cmdline::parse("ip=192.0.2.1:::24::eth0:sometimes").unwrap_err();
        assert_eq!(err.field, "autoconf");
    }

    #[test]
    fn too_many_fields_are_refused() {
        let err = Cmdline::parse("ip=192.0.2.1:::24::eth0:off::::extra").unwrap_err();
        assert_eq!(err.field, "autoconf");
        assert!(err.message.contains("11 fields"), "{err}");
    }

    #[test]
    fn an_unclosed_bracket_is_refused() {
        let err = Cmdline::parse("ip=[2001:db8::1:::64::eth0").unwrap_err();
        assert_eq!(err.field, "client-ip");
    }

    #[test]
    fn a_quoted_value_is_read_without_its_quotes() {
        assert_eq!(
            one("quiet ip=\"192.0.2.5:::24::eth0:off\"")
                .address
                .to_string(),
            "192.0.2.5/24"
        );
        assert_eq!(
            one("\"ip=192.0.2.6:::24::eth0:off\" quiet")
                .address
                .to_string(),
            "192.0.2.6/24"
        );
    }

    #[test]
    fn an_ip_argument_inside_another_parameter_s_quoted_value_states_nothing() {
        assert_eq!(
            Cmdline::parse("dyndbg=\"file a.c ip=192.0.2.5:::24::eth0 +p\" quiet").unwrap(),
            Cmdline::default()
        );
    }

    #[test]
    fn arguments_after_a_double_dash_belong_to_init() {
        assert_eq!(
            Cmdline::parse("quiet -- ip=192.0.2.5:::24::eth0").unwrap(),
            Cmdline::default()
        );
    }

    #[test]
    fn a_line_longer_than_the_kernel_accepts_is_refused() {
        let err = Cmdline::parse(&"x".repeat(MAX_CMDLINE + 1)).unwrap_err();
        assert_eq!(err.argument, None);
        assert_eq!(err.field, "length");
    }

    proptest! {
        #[test]
        fn any_input_parses_or_fails_without_panicking(line in "\\PC{0,200}") {
            let _ = Cmdline::parse(&line);
        }

        #[test]
        fn a_written_ipv4_argument_reads_back(a in any::<[u8; 4]>(), prefix in 0u8..=32, link in "[a-z][a-z0-9]{0,14}") {
            let ip = Ipv4Addr::from(a);
            let cmdline = Cmdline::parse(&format!("ip={ip}:::{prefix}::{link}:off")).unwrap();
            prop_assert_eq!(cmdline.addresses, vec![CmdlineAddress {
                link: link.clone(),
                address: IpNet::new(IpAddr::V4(ip), prefix).unwrap(),
            }]);
        }
    }
}
