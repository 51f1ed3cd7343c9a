//! Arithmetic in GF(2^8) as Linux's RAID6 code uses it: the field built on the polynomial
//! x^8 + x^4 + x^3 + x^2 + 1 (0x11d) with generator g = 2 (the element `x`).
//!
//! Addition is XOR. Multiplication goes through exponent/logarithm tables built at compile
//! time; a full 256×256 product table (64 KiB) serves the slice operations, where each
//! multiplication by a constant becomes one table row lookup per byte.

/// The field polynomial x^8 + x^4 + x^3 + x^2 + 1.
pub const POLY: u16 = 0x11d;
/// The generator whose powers weigh the data chunks in the Q syndrome.
pub const GENERATOR: u8 = 2;
/// Order of the multiplicative group: g^255 = 1.
pub const ORDER: usize = 255;

const fn build_exp() -> [u8; 2 * ORDER] {
    let mut t = [0u8; 2 * ORDER];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 2 * ORDER {
        t[i] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    t
}

const fn build_log(exp: &[u8; 2 * ORDER]) -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < ORDER {
        t[exp[i] as usize] = i as u8;
        i += 1;
    }
    t
}

const fn build_mul(exp: &[u8; 2 * ORDER], log: &[u8; 256]) -> [[u8; 256]; 256] {
    let mut t = [[0u8; 256]; 256];
    let mut a = 1;
    while a < 256 {
        let mut b = 1;
        while b < 256 {
            t[a][b] = exp[log[a] as usize + log[b] as usize];
            b += 1;
        }
        a += 1;
    }
    t
}

/// `EXP[i]` = g^i for i in 0..510 (doubled so that a sum of two logarithms needs no modulo).
static EXP: [u8; 2 * ORDER] = build_exp();
/// `LOG[a]` = i with g^i = a, for a ≠ 0 (`LOG[0]` is meaningless and unused).
static LOG: [u8; 256] = build_log(&EXP);
/// `MUL[a][b]` = a·b.
static MUL: [[u8; 256]; 256] = build_mul(&EXP, &LOG);

/// a + b (and a − b: the field has characteristic 2).
pub const fn add(a: u8, b: u8) -> u8 {
    a ^ b
}

/// a · b.
pub fn mul(a: u8, b: u8) -> u8 {
    MUL[a as usize][b as usize]
}

/// g^i for any i (taken modulo 255).
pub fn exp(i: usize) -> u8 {
    EXP[i % ORDER]
}

/// The discrete logarithm of `a` to base g; `None` for 0.
pub fn log(a: u8) -> Option<u8> {
    (a != 0).then(|| LOG[a as usize])
}

/// The multiplicative inverse of `a`; `None` for 0.
pub fn inv(a: u8) -> Option<u8> {
    log(a).map(|l| EXP[(ORDER - l as usize) % ORDER])
}

/// a / b; `None` when b is 0.
pub fn div(a: u8, b: u8) -> Option<u8> {
    inv(b).map(|ib| mul(a, ib))
}

/// The row of products c·x for every x (a lookup table for multiplying a slice by c).
pub fn mul_row(c: u8) -> &'static [u8; 256] {
    &MUL[c as usize]
}

/// dst[i] ^= c · src[i] over the common length.
pub fn mul_acc(c: u8, src: &[u8], dst: &mut [u8]) {
    let row = mul_row(c);
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= row[*s as usize];
    }
}

/// dst[i] = c · dst[i].
pub fn mul_in_place(c: u8, dst: &mut [u8]) {
    let row = mul_row(c);
    for d in dst.iter_mut() {
        *d = row[*d as usize];
    }
}

/// Multiply each of the eight bytes of `v` by g = 2 at once (carry-less shift, then reduce
/// the bytes whose top bit fell out by 0x1d), as lib/raid6's integer code does per word.
pub const fn mul2_lanes(v: u64) -> u64 {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const LOW7: u64 = 0xfefe_fefe_fefe_fefe;
    const REDUCE: u64 = 0x1d1d_1d1d_1d1d_1d1d;
    let high = v & HIGH;
    let mask = (high >> 7).wrapping_mul(0xff);
    ((v << 1) & LOW7) ^ (mask & REDUCE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Multiplication by shift-and-add with reduction, independent of the tables.
    fn slow_mul(mut a: u8, mut b: u8) -> u8 {
        let mut r = 0u8;
        while b != 0 {
            if b & 1 != 0 {
                r ^= a;
            }
            let carry = a & 0x80 != 0;
            a <<= 1;
            if carry {
                a ^= (POLY & 0xff) as u8;
            }
            b >>= 1;
        }
        r
    }

    #[test]
    fn tables_agree_with_shift_and_add_multiplication() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), slow_mul(a, b), "{a}·{b}");
            }
        }
    }

    #[test]
    fn field_axioms_hold() {
        for a in 0..=255u8 {
            assert_eq!(mul(a, 1), a, "1 is the identity");
            assert_eq!(mul(a, 0), 0);
            assert_eq!(add(a, a), 0, "characteristic 2");
            if a != 0 {
                let ia = inv(a).unwrap();
                assert_eq!(mul(a, ia), 1, "inverse of {a}");
                assert_eq!(exp(log(a).unwrap() as usize), a);
                assert_eq!(div(a, a), Some(1));
            }
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul(b, a), "commutative");
                if b != 0 {
                    assert_eq!(mul(div(a, b).unwrap(), b), a, "{a}/{b}·{b}");
                }
                // Spot-check associativity and distributivity on a stride of c.
                for c in (0..=255u8).step_by(37) {
                    assert_eq!(mul(mul(a, b), c), mul(a, mul(b, c)), "associative");
                    assert_eq!(mul(a, b ^ c), mul(a, b) ^ mul(a, c), "distributive");
                }
            }
        }
        assert_eq!(inv(0), None);
        assert_eq!(div(7, 0), None);
        assert_eq!(log(0), None);
    }

    #[test]
    fn two_generates_the_whole_multiplicative_group() {
        let mut seen = [false; 256];
        for i in 0..ORDER {
            let v = exp(i);
            assert!(!seen[v as usize], "g^{i} = {v} repeats before 255");
            seen[v as usize] = true;
        }
        assert!(!seen[0]);
        assert_eq!(exp(ORDER), 1);
        assert_eq!(exp(8), 0x1d, "x^8 reduces to x^4+x^3+x^2+1");
    }

    #[test]
    fn lane_doubling_matches_byte_multiplication() {
        let mut v = 0x0123_4567_89ab_cdefu64;
        for _ in 0..1000 {
            let doubled = mul2_lanes(v);
            for lane in 0..8 {
                let byte = (v >> (8 * lane)) as u8;
                assert_eq!((doubled >> (8 * lane)) as u8, mul(byte, GENERATOR));
            }
            v = v.rotate_left(13) ^ doubled.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        assert_eq!(mul2_lanes(u64::MAX), u64::from_le_bytes([mul(0xff, 2); 8]));
    }

    #[test]
    fn slice_helpers_multiply_every_byte() {
        let src: Vec<u8> = (0..=255).collect();
        let mut dst = vec![0x5au8; 256];
        mul_acc(0x53, &src, &mut dst);
        for (i, d) in dst.iter().enumerate() {
            assert_eq!(*d, 0x5a ^ mul(0x53, i as u8));
        }
        let mut x = src.clone();
        mul_in_place(0xca, &mut x);
        for (i, d) in x.iter().enumerate() {
            assert_eq!(*d, mul(0xca, i as u8));
        }
    }
}
