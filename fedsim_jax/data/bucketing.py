"""Shape bucketing: round sizes up so a whole experiment compiles few programs.

The executor buckets task and step counts, the runtime aggregation batches, and a
`LazyFederation` its gathered blocks; it lives in the bottom layer so all of them can use it.
"""

from __future__ import annotations


def round_up_to_bucket(n: int, significant_bits: int = 3) -> int:
  """Smallest value >= n whose binary form has at most `significant_bits` leading bits set.

  With 3 bits the buckets are 1..8, 10, 12, 14, 16, 20, 24, 28, 32, 40, ...: at most four
  programs per doubling of `n`, and at most 25% padding (under 12.5% with 4 bits). Sizes that
  are already buckets (10 clients, 20 steps, 100 -> 112 is the exception) stay unpadded.
  """
  if n < 0:
    raise ValueError(f'cannot bucket a negative size: {n}')
  if significant_bits < 1:
    raise ValueError(f'executor.bucket_bits={significant_bits}; must be >= 1')
  if n <= (1 << significant_bits):
    return n
  granularity = 1 << (n.bit_length() - significant_bits)
  return -(-n // granularity) * granularity
