"""moeplan.export package."""
