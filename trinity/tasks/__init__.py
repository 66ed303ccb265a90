"""Task suites: loaders, prompt formats, answer extractors and graders, in a registry."""
