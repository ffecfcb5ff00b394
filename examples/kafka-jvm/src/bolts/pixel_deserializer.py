import json

from streamparse import Bolt


class PixelDeserializerBolt(Bolt):
    outputs = ["ip", "url", "timestamp"]

    def process(self, tup):
        # Exceptions are automatically caught and reported
        msg = json.loads(tup.values[0])
        ip = msg.get("ip")
        url = msg.get("url")
        timestamp = msg.get("timestamp")  # unix timestamp
        if all((ip, url, timestamp)):
            self.emit([ip, url, timestamp])
