"""The timed decoding loops and the interfaces a drafter and a γ policy plug into."""
