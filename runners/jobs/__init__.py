"""Jobs: a composed config validated once into typed objects, then models, prompts and records."""
