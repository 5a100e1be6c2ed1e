from mmspec.pipelines.grid import ImageOutput, ImagePipeline, VideoOutput, VideoPipeline
from mmspec.pipelines.text import TextOutput, TextPipeline

__all__ = ["ImagePipeline", "ImageOutput", "VideoPipeline", "VideoOutput", "TextPipeline", "TextOutput"]
